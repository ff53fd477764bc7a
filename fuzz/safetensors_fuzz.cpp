// libFuzzer target for the safetensors reader (ember/nn/safetensors.h).
//
// Any input must either parse into dense CPU tensors whose byte sizes add up
// to what the file holds, or throw ember::Error; anything else (a crash, an
// AddressSanitizer or UndefinedBehaviorSanitizer report, another exception
// type, an allocation beyond the input's size) is a finding.
//
// Build (clang only): cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++
//   -DEMBER_WITH_CUDA=OFF -DEMBER_BUILD_TESTS=OFF -DEMBER_BUILD_FUZZERS=ON
//   && ninja -C build-fuzz safetensors_fuzz
// Run:   build-fuzz/fuzz/safetensors_fuzz -dict=fuzz/safetensors.dict -max_total_time=60
//          /tmp/corpus tests/nn/fixtures
#include <cstdint>
#include <cstdlib>

#include "ember/core/error.h"
#include "ember/nn/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    ember::SafetensorsContents contents = ember::parse_safetensors(data, size);
    uint64_t bytes = 0;
    for (const auto& [name, t] : contents.tensors) {
      if (!t.is_contiguous() || !t.device().is_cpu()) std::abort();
      bytes += uint64_t(t.numel()) * t.element_size();
    }
    if (bytes > size) std::abort();  // tensors hold no more than the file
  } catch (const ember::Error&) {
  }
  return 0;
}
