// The check macros of ember/core/error.h: what the message of each holds.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "ember/core/error.h"
#include "support/error_message.h"

namespace ember {
namespace {

using testing::error_of;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::throws_with;

TEST(Error, CheckStreamsItsMessageAndTheLocation) {
  const int n = 3;
  EXPECT_TRUE(throws_with([&] { EMBER_CHECK(n < 2, "op: n is " << n << "; pass fewer"); },
                          {"op: n is 3; pass fewer", "error_test.cpp:"}));
  EXPECT_NO_THROW(EMBER_CHECK(n == 3, "unused"));
}

TEST(Error, InternalAssertNamesTheConditionAndSaysItIsABug) {
  const int n = 3;
  std::string e = error_of([&] { EMBER_INTERNAL_ASSERT(n < 2); });
  EXPECT_THAT(e, HasSubstr("internal assert failed: n < 2"));
  EXPECT_THAT(e, HasSubstr("error_test.cpp:"));
  EXPECT_THAT(e, HasSubstr("this is a bug in ember, please report it"));
}

TEST(Error, InternalAssertStreamsItsDetail) {
  const int n = 3;
  EXPECT_TRUE(throws_with([&] { EMBER_INTERNAL_ASSERT(n == 2 || n == 4, "n is " << n << " after the front-end"); },
                          {"n == 2 || n == 4", "n is 3 after the front-end", "bug in ember"}));
}

TEST(Error, APassingInternalAssertEvaluatesNoDetail) {
  int streamed = 0;
  auto detail = [&] { return ++streamed; };
  EXPECT_NO_THROW(EMBER_INTERNAL_ASSERT(true, "detail " << detail()));
  EXPECT_EQ(streamed, 0);
  EXPECT_THAT(error_of([&] { EMBER_CHECK(false, "user message"); }), Not(HasSubstr("bug in ember")));
}

}  // namespace
}  // namespace ember
