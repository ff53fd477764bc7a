// Checking the text of an ember::Error, not just that one was thrown.
//
// EXPECT_TRUE(throws_with([&] { x.view({4}); }, {"view", "[2, 3]", "reshape"}))
// passes when the call throws an ember::Error whose message contains every
// listed part; otherwise the failure shows the message (or that nothing, or
// something other than an ember::Error, was thrown). error_of(fn) returns
// the message itself.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>

#include "ember/core/error.h"

namespace ember::testing {

inline ::testing::AssertionResult throws_with(const std::function<void()>& fn,
                                              std::initializer_list<std::string_view> parts) {
  std::string message;
  try {
    fn();
    return ::testing::AssertionFailure() << "no ember::Error was thrown";
  } catch (const Error& e) {
    message = e.what();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-ember exception: " << e.what();
  }
  for (std::string_view part : parts) {
    if (message.find(part) == std::string::npos) {
      return ::testing::AssertionFailure() << "the message lacks \"" << part << "\":\n  " << message;
    }
  }
  return ::testing::AssertionSuccess();
}

// The message of the ember::Error fn throws, or "no error" (for
// EXPECT_THAT(error_of(...), HasSubstr(...)) and comparisons of messages).
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace ember::testing
