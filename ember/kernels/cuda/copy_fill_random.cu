// CUDA kernels of casts/copies, fills, arange and Philox random fills.
#include "ember/core/ops/elementwise_kernels.h"
#include "ember/core/philox.h"
#include "ember/kernels/cuda/common/elementwise_launch.cuh"

namespace ember::cuda {
namespace {

// Converts between compute types; to bool means "is nonzero".
template <typename O, typename I>
struct CastFn {
  __device__ acc_t<O> operator()(acc_t<I> x) const {
    if constexpr (std::is_same_v<O, bool>) return x != acc_t<I>(0);
    else return acc_t<O>(x);
  }
};

template <typename A>
struct FillFn {
  A value;
  __device__ A operator()() const { return value; }
};

// Term i of arange's sequence, as the CPU kernel computes it: start + i *
// step rounded after the product and after the sum (no fused multiply-add,
// which the CPU build does not contract either).
template <typename T>
struct ArangeFn {
  ArangeSequence seq;
  __device__ double term(int64_t i) const { return __dadd_rn(seq.start, __dmul_rn(double(i), seq.step)); }
  __device__ acc_t<T> operator()(int64_t i) const {
    if constexpr (std::is_integral_v<T>) {
      return seq.floating ? T(term(i)) : T(seq.int_start + i * seq.int_step);
    } else {
      return acc_t<T>(T(seq.floating ? term(i) : double(seq.int_start + i * seq.int_step)));
    }
  }
};

template <typename T>
struct UniformFn {
  uint64_t seed, offset;
  float lo, span;
  double hi;
  __device__ acc_t<T> operator()(int64_t i) const {
    philox::Uint4 r = philox::generate(seed, offset + uint64_t(i));
    // Rounding to a 16-bit type can reach hi; keep [lo, hi) as PyTorch does
    // (and as the CPU kernel does, so both give the same numbers).
    acc_t<T> v = acc_t<T>(T(lo + span * philox::uniform(r.x)));
    return double(v) < hi ? v : acc_t<T>(lo);
  }
};

template <typename A>
struct NormalFn {
  uint64_t seed, offset;
  float mean, std;
  __device__ A operator()(int64_t i) const {
    philox::Uint4 r = philox::generate(seed, offset + uint64_t(i));
    float u1 = philox::uniform_open0(r.x), u2 = philox::uniform(r.y);
    return A(mean + std * (sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795864769f * u2)));
  }
};

void cast_kernel(const ElementwiseArgs& args, DType out_dtype, DType in_dtype) {
  EMBER_DISPATCH_DTYPE(out_dtype, "copy", [&]<typename O>() {
    EMBER_DISPATCH_DTYPE(in_dtype, "copy", [&]<typename I>() { launch_map<O, I>(args, CastFn<O, I>{}); });
  });
}

void fill_kernel(const ElementwiseArgs& args, DType dtype, const Scalar& value) {
  EMBER_DISPATCH_DTYPE(dtype, "fill",
                       [&]<typename T>() { launch_map<T>(args, FillFn<acc_t<T>>{value.to<acc_t<T>>()}); });
}

void arange_kernel(const ElementwiseArgs& args, DType dtype, const ArangeSequence& seq) {
  EMBER_DISPATCH_DTYPE(dtype, "arange", [&]<typename T>() { launch_generate<T>(args, ArangeFn<T>{seq}); });
}

void random_kernel(const ElementwiseArgs& args, DType dtype, RandomKind kind, GeneratorState st, double a, double b) {
  EMBER_DISPATCH_FLOAT(dtype, "random", [&]<typename T>() {
    using A = acc_t<T>;
    if (kind == RandomKind::Uniform) {
      launch_generate<T>(args, UniformFn<T>{st.seed, st.offset, float(a), float(b - a), b});
    } else {
      launch_generate<T>(args, NormalFn<A>{st.seed, st.offset, float(a), float(b)});
    }
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(cast_stub, DeviceType::CUDA, cast_kernel);
EMBER_REGISTER_KERNEL(fill_stub, DeviceType::CUDA, fill_kernel);
EMBER_REGISTER_KERNEL(random_stub, DeviceType::CUDA, random_kernel);
EMBER_REGISTER_KERNEL(arange_stub, DeviceType::CUDA, arange_kernel);

}  // namespace ember::cuda
