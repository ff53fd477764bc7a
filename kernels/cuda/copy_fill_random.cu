// CUDA kernels of casts/copies, fills and Philox random fills.
#include "core/ops/elementwise_kernels.h"
#include "core/philox.h"
#include "kernels/cuda/elementwise_launch.cuh"

namespace ember::cuda {
namespace {

void cast_kernel(const ElementwiseArgs& args, DType out_dtype, DType in_dtype) {
  EMBER_DISPATCH_DTYPE(out_dtype, "copy", [&]<typename O>() {
    EMBER_DISPATCH_DTYPE(in_dtype, "copy", [&]<typename I>() {
      if constexpr (std::is_same_v<O, I>) {
        launch_map<O, I>(args, [] __device__(acc_t<I> x) { return x; });
      } else if constexpr (std::is_same_v<O, bool>) {
        launch_map<O, I>(args, [] __device__(acc_t<I> x) { return x != acc_t<I>(0); });
      } else {
        launch_map<O, I>(args, [] __device__(acc_t<I> x) { return acc_t<O>(x); });
      }
    });
  });
}

void fill_kernel(const ElementwiseArgs& args, DType dtype, const Scalar& value) {
  EMBER_DISPATCH_DTYPE(dtype, "fill", [&]<typename T>() {
    acc_t<T> v = value.to<acc_t<T>>();
    launch_map<T>(args, [v] __device__() { return v; });
  });
}

void random_kernel(const ElementwiseArgs& args, DType dtype, RandomKind kind, GeneratorState st, double a, double b) {
  EMBER_DISPATCH_FLOAT(dtype, "random", [&]<typename T>() {
    using A = acc_t<T>;
    uint64_t seed = st.seed, offset = st.offset;
    if (kind == RandomKind::Uniform) {
      float lo = float(a), span = float(b - a);
      launch_generate<T>(args, [=] __device__(int64_t i) {
        philox::Uint4 r = philox::generate(seed, offset + uint64_t(i));
        return A(lo + span * philox::uniform(r.x));
      });
    } else {
      float mean = float(a), std = float(b);
      launch_generate<T>(args, [=] __device__(int64_t i) {
        philox::Uint4 r = philox::generate(seed, offset + uint64_t(i));
        float u1 = philox::uniform_open0(r.x), u2 = philox::uniform(r.y);
        float z = sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795864769f * u2);
        return A(mean + std * z);
      });
    }
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(cast_stub, DeviceType::CUDA, cast_kernel);
EMBER_REGISTER_KERNEL(fill_stub, DeviceType::CUDA, fill_kernel);
EMBER_REGISTER_KERNEL(random_stub, DeviceType::CUDA, random_kernel);

}  // namespace ember::cuda
