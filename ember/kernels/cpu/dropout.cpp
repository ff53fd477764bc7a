// CPU dropout kernel (contract in ember/core/ops/dropout_kernels.h). Element i's
// mask comes from Philox at offset + i, so the elements split over threads
// (ember/core/parallel_for.h) with the result of one thread. A Philox draw
// costs tens of operations (about 5 ns an element on one thread), hence a
// grain of 1024: a 64 x 128 activation is 8 chunks.
#include "ember/core/ops/dropout_kernels.h"
#include "ember/core/parallel_for.h"
#include "ember/core/philox.h"
#include "ember/kernels/acc_type.h"

namespace ember::cpu {
namespace {

// Elements [begin, end): the arguments as locals and restrict pointers, so
// that nothing in the loop may change them and it vectorizes.
template <typename T>
void dropout_range(const T* __restrict in, T* __restrict out, int64_t begin, int64_t end, uint64_t seed,
                   uint64_t offset, float p, acc_t<T> scale) {
  for (int64_t i = begin; i < end; ++i) {
    const bool keep = philox::uniform(philox::generate(seed, offset + uint64_t(i)).x) >= p;
    out[i] = keep ? T(acc_t<T>(acc_t<T>(in[i]) * scale)) : T(0.0f);
  }
}

void dropout_kernel(const DropoutArgs& a) {
  EMBER_DISPATCH_FLOAT(a.dtype, "dropout", [&]<typename T>() {
    const T* in = static_cast<const T*>(a.in);
    T* out = static_cast<T*>(a.out);
    parallel_for(0, a.n, kCpuGrain / 32, [&](int64_t begin, int64_t end) {
      dropout_range(in, out, begin, end, a.state.seed, a.state.offset, float(a.p), acc_t<T>(a.scale));
    });
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(dropout_stub, DeviceType::CPU, dropout_kernel);

}  // namespace ember::cpu
