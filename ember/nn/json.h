// A small, strict JSON (RFC 8259) reader and string writer: what the
// safetensors header needs, and no more.
//
// Contract:
// - parse() accepts exactly one JSON value surrounded by optional
//   whitespace. It rejects, with a json::ParseError naming the problem and
//   the byte offset: invalid UTF-8 (overlong forms, surrogates, code points
//   above U+10FFFF), raw control characters in strings, bad escapes and
//   lone surrogate escapes, numbers outside the JSON grammar, duplicate
//   object keys, trailing data and nesting deeper than max_depth. It never
//   reads outside `text`, and its recursion is bounded by max_depth.
// - Numbers keep their literal text; as_uint64() converts one that is a
//   non-negative integer without fraction or exponent and that fits.
// - quote() writes a JSON string literal for valid UTF-8 (an ember::Error
//   otherwise), escaping '"', '\\' and control characters.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ember/core/error.h"

namespace ember::json {

class ParseError : public Error {
 public:
  ParseError(const std::string& message, size_t offset)
      : Error(message + " at byte " + std::to_string(offset)), offset(offset) {}
  size_t offset;
};

struct Value {
  enum class Kind { Null, Bool, Number, String, Array, Object };
  // Defined out of line: `object` holds pairs of the still incomplete Value.
  Value();
  Value(const Value&);
  Value(Value&&) noexcept;
  Value& operator=(const Value&);
  Value& operator=(Value&&) noexcept;
  ~Value();

  Kind kind = Kind::Null;
  bool boolean = false;
  std::string text;  // String: the decoded UTF-8; Number: the literal
  std::vector<Value> array;
  std::vector<std::pair<std::string, Value>> object;  // in document order, keys unique

  bool is_string() const { return kind == Kind::String; }
  bool is_object() const { return kind == Kind::Object; }
  bool is_array() const { return kind == Kind::Array; }
  // The member named key, or null.
  const Value* find(std::string_view key) const;
  // The number as uint64 when it is a plain non-negative integer that fits.
  std::optional<uint64_t> as_uint64() const;
};

// "object", "string", ...: for error messages.
const char* kind_name(Value::Kind kind);

Value parse(std::string_view text, int max_depth = 64);

bool valid_utf8(std::string_view s);
std::string quote(std::string_view s);

}  // namespace ember::json
