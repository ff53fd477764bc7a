// CUDA kernels of the binary elementwise ops, tensor-tensor and
// tensor-scalar (the scalar travels by value in the functor).
#include "core/ops/elementwise_kernels.h"
#include "kernels/cuda/elementwise_launch.cuh"
#include "kernels/elementwise_math.h"

namespace ember::cuda {
namespace {

void binary_kernel(BinaryOp op, const ElementwiseArgs& args, DType dtype, const ScalarOperand& scalar) {
  EMBER_DISPATCH_DTYPE(dtype, "binary", [&]<typename T>() {
    using A = acc_t<T>;
    EMBER_SWITCH_BINARY_OP(op, OP, {
      if constexpr (!math::binary_supported<OP, T>()) {
        EMBER_FAIL("binary op " << int(op) << " has no kernel for dtype " << dtype_name(dtype));
      } else if (scalar.side == ScalarOperand::Side::None) {
        launch_map<T, T, T>(args, [] __device__(A a, A b) { return math::binary<OP>(a, b); });
      } else {
        A s = scalar.value.to<A>();
        bool lhs = scalar.side == ScalarOperand::Side::Lhs;
        launch_map<T, T>(args, [s, lhs] __device__(A x) { return lhs ? math::binary<OP>(s, x) : math::binary<OP>(x, s); });
      }
    });
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(binary_stub, DeviceType::CUDA, binary_kernel);

}  // namespace ember::cuda
