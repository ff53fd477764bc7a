// Builds the final text of an ember::Error: the message first, because that
// is what a user reads, then where in ember it was raised.
#include "core/error.h"

namespace ember::detail {

void throw_error(const std::string& message, const char* file, int line) {
  std::string where = file;
  size_t slash = std::string::npos;
  for (const char* layer : {"/core/", "/kernels/", "/nn/", "/data/", "/optim/", "/parallel/"}) {
    if (slash == std::string::npos) slash = where.rfind(layer);
  }
  if (slash != std::string::npos) where = where.substr(slash + 1);
  throw Error(message + " [" + where + ":" + std::to_string(line) + "]");
}

}  // namespace ember::detail
