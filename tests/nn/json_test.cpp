// The strict JSON reader and string writer of ember/nn/json.h.
#include "ember/nn/json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "support/error_message.h"

namespace ember {
namespace {

using testing::error_of;
using ::testing::HasSubstr;

TEST(Json, ParsesNestedValuesInOrder) {
  json::Value v = json::parse(R"( {"b": [1, -2.5e3, true, null], "a": {"s": "x"}, "e": []} )");
  ASSERT_TRUE(v.is_object());
  ASSERT_EQ(v.object.size(), 3u);
  EXPECT_EQ(v.object[0].first, "b");
  const json::Value* b = v.find("b");
  ASSERT_TRUE(b && b->is_array());
  EXPECT_EQ(b->array[0].as_uint64(), 1u);
  EXPECT_EQ(b->array[1].text, "-2.5e3");
  EXPECT_FALSE(b->array[1].as_uint64().has_value());
  EXPECT_TRUE(b->array[2].boolean);
  EXPECT_EQ(b->array[3].kind, json::Value::Kind::Null);
  EXPECT_EQ(v.find("a")->find("s")->text, "x");
  EXPECT_EQ(v.find("zz"), nullptr);
}

TEST(Json, StringEscapesAndUtf8) {
  json::Value v = json::parse(R"("q\" b\\ s\/ \b\f\n\r\t \u00e9 \ud83d\ude00 é")");
  EXPECT_EQ(v.text, "q\" b\\ s/ \b\f\n\r\t \xc3\xa9 \xf0\x9f\x98\x80 \xc3\xa9");
  EXPECT_EQ(json::quote("a\"b\\c\nd\x01"), R"("a\"b\\c\nd\u0001")");
  EXPECT_EQ(json::parse(json::quote("tab\t\xe2\x82\xac")).text, "tab\t\xe2\x82\xac");
}

TEST(Json, Uint64Limits) {
  EXPECT_EQ(json::parse("18446744073709551615").as_uint64(), UINT64_MAX);
  EXPECT_FALSE(json::parse("18446744073709551616").as_uint64().has_value());
  EXPECT_FALSE(json::parse("-1").as_uint64().has_value());
  EXPECT_FALSE(json::parse("1.0").as_uint64().has_value());
  EXPECT_EQ(json::parse("0").as_uint64(), 0u);
}

TEST(Json, RejectsWhatTheGrammarDoesNot) {
  const std::pair<const char*, const char*> cases[] = {
      {"01", "leading zero in a number at byte 1"},
      {"1.", "expected a digit after '.'"},
      {"1e", "expected a digit in the exponent"},
      {"-", "unexpected end of input in a number"},
      {"+1", "unexpected character, expected a value at byte 0"},
      {"[1,]", "unexpected character, expected a value at byte 3"},
      {"{\"a\":1,}", "expected a string key"},
      {"{\"a\" 1}", "expected ':'"},
      {"{\"a\":1,\"a\":2}", "duplicate key \"a\" at byte 7"},
      {"\"abc", "unterminated string"},
      {"\"a\x01\"", "control character in a string"},
      {"\"\\x\"", "bad escape at byte 2"},
      {"\"\\u12g4\"", "bad hex digit"},
      {"\"\\ud800\"", "high surrogate not followed by a low surrogate"},
      {"\"\\udc00\"", "lone low surrogate"},
      {"\"\xc0\xaf\"", "invalid UTF-8 at byte 1"},      // overlong '/'
      {"\"\xed\xa0\x80\"", "invalid UTF-8 at byte 1"},  // encoded surrogate
      {"\"\xf4\x90\x80\x80\"", "invalid UTF-8"},        // above U+10FFFF
      {"\"\xe2\x82\"", "invalid UTF-8"},                // truncated sequence
      {"tru", "unexpected character"},
      {"", "unexpected end of input, expected a value at byte 0"},
      {"[] []", "unexpected data after the JSON value at byte 3"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.first);
    EXPECT_THAT(error_of([&] { json::parse(c.first); }), HasSubstr(c.second));
  }
}

TEST(Json, DepthIsBounded) {
  std::string deep(100000, '[');
  EXPECT_THAT(error_of([&] { json::parse(deep); }), HasSubstr("nesting deeper than 64 levels"));
  EXPECT_THAT(error_of([&] { json::parse("[[[1]]]", 2); }), HasSubstr("nesting deeper than 2 levels at byte 2"));
  EXPECT_EQ(json::parse("[[1]]", 2).array[0].array[0].text, "1");
}

TEST(Json, QuoteRejectsInvalidUtf8) {
  EXPECT_THAT(error_of([&] { json::quote("\xff"); }), HasSubstr("not valid UTF-8"));
  EXPECT_TRUE(json::valid_utf8("plain \xf0\x9f\x98\x80"));
  EXPECT_FALSE(json::valid_utf8("\x80"));
}

}  // namespace
}  // namespace ember
