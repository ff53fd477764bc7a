// CUDA kernels of comparisons (bool results) and where.
#include "ember/core/ops/elementwise_kernels.h"
#include "ember/kernels/cuda/common/elementwise_launch.cuh"
#include "ember/kernels/elementwise_math.h"

namespace ember::cuda {
namespace {

template <CompareOp OP, typename A>
struct CompareFn {
  __device__ bool operator()(A a, A b) const { return math::compare<OP>(a, b); }
};

template <CompareOp OP, typename A>
struct CompareScalarFn {
  A scalar;
  bool scalar_is_lhs;
  __device__ bool operator()(A x) const {
    return scalar_is_lhs ? math::compare<OP>(scalar, x) : math::compare<OP>(x, scalar);
  }
};

template <typename A>
struct WhereFn {
  __device__ A operator()(bool c, A a, A b) const { return c ? a : b; }
};

void compare_kernel(CompareOp op, const ElementwiseArgs& args, DType dtype, const ScalarOperand& scalar) {
  EMBER_DISPATCH_DTYPE(dtype, "compare", [&]<typename T>() {
    using A = acc_t<T>;
    EMBER_SWITCH_COMPARE_OP(op, OP, {
      if (scalar.side == ScalarOperand::Side::None) {
        launch_map<bool, T, T>(args, CompareFn<OP, A>{});
      } else {
        launch_map<bool, T>(args,
                            CompareScalarFn<OP, A>{scalar.value.to<A>(), scalar.side == ScalarOperand::Side::Lhs});
      }
    });
  });
}

void where_kernel(const ElementwiseArgs& args, DType dtype) {
  EMBER_DISPATCH_DTYPE(dtype, "where", [&]<typename T>() { launch_map<T, bool, T, T>(args, WhereFn<acc_t<T>>{}); });
}

}  // namespace

EMBER_REGISTER_KERNEL(compare_stub, DeviceType::CUDA, compare_kernel);
EMBER_REGISTER_KERNEL(where_stub, DeviceType::CUDA, where_kernel);

}  // namespace ember::cuda
