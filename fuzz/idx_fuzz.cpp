// libFuzzer target for the IDX parser (ember/data/idx.h), gzip layer included:
// any input must either parse into a tensor that matches its header or be
// rejected with an ember::Error. A crash, a sanitizer report, another
// exception type, or a tensor that breaks the contract is a finding.
// Seeds: fuzz/corpus/idx (plain and gzip idx1/idx3 files).
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "ember/core/error.h"
#include "ember/data/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ember::Tensor t;
  try {
    t = ember::data::parse_idx(data, size, "<fuzz>");
  } catch (const ember::Error&) {
    return 0;
  }
  // Rank 1 is int64 bytes in [0, 255]; higher ranks float32 in [0, 1].
  if (t.dim() == 1) {
    const int64_t* v = t.data<int64_t>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (v[i] < 0 || v[i] > 255) std::abort();
    }
  } else {
    const float* v = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (!(v[i] >= 0.0f && v[i] <= 1.0f)) std::abort();
    }
  }
  return 0;
}
