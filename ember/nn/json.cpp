// The strict JSON reader and string writer (see ember/nn/json.h).
#include "ember/nn/json.h"

#include <cstdio>

namespace ember::json {

namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 if invalid.
size_t utf8_sequence(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c == 0xE0) n = 3, lo = 0xA0;
  else if (c == 0xED) n = 3, hi = 0x9F;  // no UTF-16 surrogates
  else if (c >= 0xE1 && c <= 0xEF) n = 3;
  else if (c == 0xF0) n = 4, lo = 0x90;
  else if (c >= 0xF1 && c <= 0xF3) n = 4;
  else if (c == 0xF4) n = 4, hi = 0x8F;  // nothing above U+10FFFF
  else return 0;
  if (i + n > s.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return n;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

class Parser {
 public:
  Parser(std::string_view text, int max_depth) : s_(text), max_depth_(max_depth) {}

  Value document() {
    skip_ws();
    Value v = value(0);
    skip_ws();
    if (i_ != s_.size()) fail("unexpected data after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw ParseError(what, i_); }

  bool at_end() const { return i_ >= s_.size(); }
  char peek() const { return s_[i_]; }

  void skip_ws() {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r')) ++i_;
  }

  void expect(char c) {
    if (at_end()) fail(std::string("unexpected end of input, expected '") + c + "'");
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }

  Value value(int depth) {
    if (at_end()) fail("unexpected end of input, expected a value");
    const char c = peek();
    if (c == '{' || c == '[') {
      if (depth >= max_depth_) fail("nesting deeper than " + std::to_string(max_depth_) + " levels");
      return c == '{' ? object(depth + 1) : array(depth + 1);
    }
    Value v;
    if (c == '"') {
      v.kind = Value::Kind::String;
      v.text = string();
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = Value::Kind::Number;
      v.text = number();
    } else if (literal("true")) {
      v.kind = Value::Kind::Bool;
      v.boolean = true;
    } else if (literal("false")) {
      v.kind = Value::Kind::Bool;
    } else if (literal("null")) {
      v.kind = Value::Kind::Null;
    } else {
      fail("unexpected character, expected a value");
    }
    return v;
  }

  bool literal(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) return false;
    i_ += word.size();
    return true;
  }

  Value object(int depth) {
    Value v;
    v.kind = Value::Kind::Object;
    expect('{');
    skip_ws();
    if (!at_end() && peek() == '}') {
      ++i_;
      return v;
    }
    while (true) {
      skip_ws();
      if (at_end() || peek() != '"') fail("expected a string key");
      const size_t key_at = i_;
      std::string key = string();
      for (const auto& member : v.object) {
        if (member.first == key) throw ParseError("duplicate key \"" + key + "\"", key_at);
      }
      skip_ws();
      expect(':');
      skip_ws();
      v.object.emplace_back(std::move(key), value(depth));
      skip_ws();
      if (at_end()) fail("unexpected end of input in an object");
      if (peek() == '}') {
        ++i_;
        return v;
      }
      expect(',');
    }
  }

  Value array(int depth) {
    Value v;
    v.kind = Value::Kind::Array;
    expect('[');
    skip_ws();
    if (!at_end() && peek() == ']') {
      ++i_;
      return v;
    }
    while (true) {
      skip_ws();
      v.array.push_back(value(depth));
      skip_ws();
      if (at_end()) fail("unexpected end of input in an array");
      if (peek() == ']') {
        ++i_;
        return v;
      }
      expect(',');
    }
  }

  uint32_t hex4() {
    if (i_ + 4 > s_.size()) fail("unexpected end of input in a \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[i_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= uint32_t(c - '0');
      else if (c >= 'a' && c <= 'f') v |= uint32_t(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= uint32_t(c - 'A' + 10);
      else fail("bad hex digit in a \\u escape");
    }
    return v;
  }

  std::string string() {
    expect('"');
    std::string out;
    while (true) {
      if (at_end()) fail("unterminated string");
      const unsigned char c = static_cast<unsigned char>(peek());
      if (c == '"') {
        ++i_;
        return out;
      }
      if (c < 0x20) fail("control character in a string");
      if (c == '\\') {
        ++i_;
        if (at_end()) fail("unterminated escape");
        const char e = s_[i_++];
        switch (e) {
          case '"': out += '"'; break;
          case '\\': out += '\\'; break;
          case '/': out += '/'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'n': out += '\n'; break;
          case 'r': out += '\r'; break;
          case 't': out += '\t'; break;
          case 'u': {
            uint32_t cp = hex4();
            if (cp >= 0xDC00 && cp <= 0xDFFF) fail("lone low surrogate in a \\u escape");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
              if (s_.substr(i_, 2) != "\\u") fail("high surrogate not followed by a low surrogate");
              i_ += 2;
              const uint32_t low = hex4();
              if (low < 0xDC00 || low > 0xDFFF) fail("high surrogate not followed by a low surrogate");
              cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            }
            append_utf8(out, cp);
            break;
          }
          default: --i_; fail("bad escape");
        }
        continue;
      }
      const size_t n = utf8_sequence(s_, i_);
      if (n == 0) fail("invalid UTF-8");
      out.append(s_.substr(i_, n));
      i_ += n;
    }
  }

  std::string number() {
    const size_t start = i_;
    auto digits = [&] {
      const size_t from = i_;
      while (!at_end() && peek() >= '0' && peek() <= '9') ++i_;
      return i_ > from;
    };
    if (peek() == '-') ++i_;
    if (at_end()) fail("unexpected end of input in a number");
    if (peek() == '0') {
      ++i_;
    } else if (!digits()) {
      fail("expected a digit");
    }
    if (!at_end() && peek() == '.') {
      ++i_;
      if (!digits()) fail("expected a digit after '.'");
    }
    if (!at_end() && (peek() == 'e' || peek() == 'E')) {
      ++i_;
      if (!at_end() && (peek() == '+' || peek() == '-')) ++i_;
      if (!digits()) fail("expected a digit in the exponent");
    }
    if (!at_end() && peek() >= '0' && peek() <= '9') fail("leading zero in a number");
    return std::string(s_.substr(start, i_ - start));
  }

  std::string_view s_;
  int max_depth_;
  size_t i_ = 0;
};

}  // namespace

Value::Value() = default;
Value::Value(const Value&) = default;
Value::Value(Value&&) noexcept = default;
Value& Value::operator=(const Value&) = default;
Value& Value::operator=(Value&&) noexcept = default;
Value::~Value() = default;

const Value* Value::find(std::string_view key) const {
  for (const auto& member : object) {
    if (member.first == key) return &member.second;
  }
  return nullptr;
}

std::optional<uint64_t> Value::as_uint64() const {
  if (kind != Kind::Number || text.empty() || (text.size() > 1 && text[0] == '0')) return std::nullopt;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    const uint64_t d = uint64_t(c - '0');
    if (v > (UINT64_MAX - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  return v;
}

const char* kind_name(Value::Kind kind) {
  switch (kind) {
    case Value::Kind::Null: return "null";
    case Value::Kind::Bool: return "boolean";
    case Value::Kind::Number: return "number";
    case Value::Kind::String: return "string";
    case Value::Kind::Array: return "array";
    case Value::Kind::Object: return "object";
  }
  return "value";
}

Value parse(std::string_view text, int max_depth) { return Parser(text, max_depth).document(); }

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string quote(std::string_view s) {
  EMBER_CHECK(valid_utf8(s), "json::quote: the string is not valid UTF-8; names and metadata must be UTF-8 text");
  std::string out = "\"";
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
      out += buf;
    } else {
      out += ch;
    }
  }
  out += '"';
  return out;
}

}  // namespace ember::json
