// ember::Error and the check macros every layer uses.
//
// Contract: bad input never crashes, exits or returns garbage. It throws an
// ember::Error whose message names the op, the shapes, dtypes and devices
// involved, and says what to do. EMBER_CHECK builds that message with stream
// syntax only when the condition fails, so a passing check costs one branch.
//
// EMBER_CHECK is for what a caller can get wrong; EMBER_INTERNAL_ASSERT is
// for what only a bug in ember can break (a kernel's arguments that the
// front-end built, a switch over every enumerator), so its message says so
// instead of asking the user to fix their input.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace ember {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Thrown when a device allocation cannot be satisfied even after the cache
// was released; derived from Error so generic handlers still catch it.
class OutOfMemoryError : public Error {
 public:
  explicit OutOfMemoryError(const std::string& message) : Error(message) {}
};

namespace detail {
[[noreturn]] void throw_error(const std::string& message, const char* file, int line);
// The ember::Error of a failed EMBER_INTERNAL_ASSERT: the condition's text,
// the location, the (possibly empty) detail and the request to report it.
[[noreturn]] void throw_internal_error(const char* condition, const std::string& detail, const char* file, int line);
}  // namespace detail

}  // namespace ember

// EMBER_CHECK(cond, "op: " << a << " vs " << b): throws ember::Error with the
// streamed message (and the source location) when cond is false.
#define EMBER_CHECK(cond, ...)                                                     \
  do {                                                                             \
    if (!(cond)) [[unlikely]] {                                                    \
      std::ostringstream ember_check_stream_;                                      \
      ember_check_stream_ << __VA_ARGS__;                                          \
      ::ember::detail::throw_error(ember_check_stream_.str(), __FILE__, __LINE__); \
    }                                                                              \
  } while (0)

#define EMBER_FAIL(...) EMBER_CHECK(false, __VA_ARGS__)

// EMBER_INTERNAL_ASSERT(cond) or EMBER_INTERNAL_ASSERT(cond, "detail " << x):
// an invariant of ember's own code (PyTorch's TORCH_INTERNAL_ASSERT). Throws
// an ember::Error that names the failed condition, the file and line, the
// optional streamed detail, and says that this is a bug in ember. Not for
// anything user input can reach: that is EMBER_CHECK with a message that
// says what to do.
#define EMBER_INTERNAL_ASSERT(cond, ...)                                                            \
  do {                                                                                              \
    if (!(cond)) [[unlikely]] {                                                                     \
      std::ostringstream ember_assert_stream_;                                                      \
      __VA_OPT__(ember_assert_stream_ << __VA_ARGS__;)                                              \
      ::ember::detail::throw_internal_error(#cond, ember_assert_stream_.str(), __FILE__, __LINE__); \
    }                                                                                               \
  } while (0)
