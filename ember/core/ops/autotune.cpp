// The autotuning switches of ember/core/ops.h: gemm_autotune() and
// conv_autotune(), each on unless its environment variable is "0" when it
// is first read.
#include <atomic>
#include <cstdlib>
#include <string>

#include "ember/core/ops.h"

namespace ember {
namespace {

bool on_unless_zero(const char* variable) {
  const char* v = std::getenv(variable);
  return v == nullptr || std::string(v) != "0";
}

std::atomic<bool>& gemm_flag() {
  static std::atomic<bool> on{on_unless_zero("EMBER_GEMM_AUTOTUNE")};
  return on;
}

std::atomic<bool>& conv_flag() {
  static std::atomic<bool> on{on_unless_zero("EMBER_CONV_AUTOTUNE")};
  return on;
}

}  // namespace

void set_gemm_autotune(bool on) { gemm_flag().store(on, std::memory_order_relaxed); }
bool gemm_autotune() { return gemm_flag().load(std::memory_order_relaxed); }

void set_conv_autotune(bool on) { conv_flag().store(on, std::memory_order_relaxed); }
bool conv_autotune() { return conv_flag().load(std::memory_order_relaxed); }

}  // namespace ember
