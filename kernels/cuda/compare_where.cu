// CUDA kernels of comparisons (bool results) and where.
#include "core/ops/elementwise_kernels.h"
#include "kernels/cuda/elementwise_launch.cuh"
#include "kernels/elementwise_math.h"

namespace ember::cuda {
namespace {

void compare_kernel(CompareOp op, const ElementwiseArgs& args, DType dtype, const ScalarOperand& scalar) {
  EMBER_DISPATCH_DTYPE(dtype, "compare", [&]<typename T>() {
    using A = acc_t<T>;
    EMBER_SWITCH_COMPARE_OP(op, OP, {
      if (scalar.side == ScalarOperand::Side::None) {
        launch_map<bool, T, T>(args, [] __device__(A a, A b) { return math::compare<OP>(a, b); });
      } else {
        A s = scalar.value.to<A>();
        bool lhs = scalar.side == ScalarOperand::Side::Lhs;
        launch_map<bool, T>(args, [s, lhs] __device__(A x) { return lhs ? math::compare<OP>(s, x) : math::compare<OP>(x, s); });
      }
    });
  });
}

void where_kernel(const ElementwiseArgs& args, DType dtype) {
  EMBER_DISPATCH_DTYPE(dtype, "where", [&]<typename T>() {
    using A = acc_t<T>;
    launch_map<T, bool, T, T>(args, [] __device__(bool c, A a, A b) { return c ? a : b; });
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(compare_stub, DeviceType::CUDA, compare_kernel);
EMBER_REGISTER_KERNEL(where_stub, DeviceType::CUDA, where_kernel);

}  // namespace ember::cuda
