// CUDA kernels of the binary elementwise ops, tensor-tensor and
// tensor-scalar (the scalar travels by value in the functor).
#include "ember/core/ops/elementwise_kernels.h"
#include "ember/kernels/cuda/common/elementwise_launch.cuh"
#include "ember/kernels/elementwise_math.h"

namespace ember::cuda {
namespace {

template <BinaryOp OP, typename A>
struct BinaryFn {
  __device__ A operator()(A a, A b) const { return math::binary<OP>(a, b); }
};

template <BinaryOp OP, typename A>
struct BinaryScalarFn {
  A scalar;
  bool scalar_is_lhs;
  __device__ A operator()(A x) const {
    return scalar_is_lhs ? math::binary<OP>(scalar, x) : math::binary<OP>(x, scalar);
  }
};

void binary_kernel(BinaryOp op, const ElementwiseArgs& args, DType dtype, const ScalarOperand& scalar) {
  EMBER_DISPATCH_DTYPE(dtype, "binary", [&]<typename T>() {
    using A = acc_t<T>;
    EMBER_SWITCH_BINARY_OP(op, OP, {
      if constexpr (!math::binary_supported<OP, T>()) {
        EMBER_FAIL("binary op " << int(op) << " has no kernel for dtype " << dtype_name(dtype));
      } else if (scalar.side == ScalarOperand::Side::None) {
        launch_map<T, T, T>(args, BinaryFn<OP, A>{});
      } else {
        launch_map<T, T>(args, BinaryScalarFn<OP, A>{scalar.value.to<A>(), scalar.side == ScalarOperand::Side::Lhs});
      }
    });
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(binary_stub, DeviceType::CUDA, binary_kernel);

}  // namespace ember::cuda
