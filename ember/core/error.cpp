// Builds the final text of an ember::Error: the message first, because that
// is what a user reads, then where in ember it was raised.
#include "ember/core/error.h"

namespace ember::detail {

namespace {

// "ember/core/ops/conv.cpp:12": the location relative to the source tree.
std::string location(const char* file, int line) {
  std::string where = file;
  size_t slash = std::string::npos;
  for (const char* layer : {"/core/", "/kernels/", "/nn/", "/data/", "/optim/", "/parallel/"}) {
    if (slash == std::string::npos) slash = where.rfind(layer);
  }
  if (slash != std::string::npos) where = where.substr(slash + 1);
  return where + ":" + std::to_string(line);
}

}  // namespace

void throw_error(const std::string& message, const char* file, int line) {
  throw Error(message + " [" + location(file, line) + "]");
}

void throw_internal_error(const char* condition, const std::string& detail, const char* file, int line) {
  std::string message = std::string("internal assert failed: ") + condition + " at " + location(file, line);
  if (!detail.empty()) message += ": " + detail;
  throw Error(message + "; this is a bug in ember, please report it");
}

}  // namespace ember::detail
