// error_text(f): the message of the ember::Error that f throws, or
// "(no error)", so a test can check what an error says:
//   EXPECT_THAT(error_text([&] { op(); }), HasSubstr("shape [2, 3]"));
#pragma once

#include <string>

#include "core/error.h"

namespace ember::testing {

template <typename F>
std::string error_text(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace ember::testing
