// CUDA kernels of the unary elementwise ops (math in kernels/elementwise_math.h).
#include "core/ops/elementwise_kernels.h"
#include "kernels/cuda/elementwise_launch.cuh"
#include "kernels/elementwise_math.h"

namespace ember::cuda {
namespace {

void unary_kernel(UnaryOp op, const ElementwiseArgs& args, DType dtype) {
  EMBER_DISPATCH_DTYPE(dtype, "unary", [&]<typename T>() {
    EMBER_SWITCH_UNARY_OP(op, OP, {
      if constexpr (math::unary_supported<OP, T>()) {
        launch_map<T, T>(args, [] __device__(acc_t<T> x) { return math::unary<OP>(x); });
      } else {
        EMBER_FAIL("unary op " << int(op) << " has no kernel for dtype " << dtype_name(dtype));
      }
    });
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(unary_stub, DeviceType::CUDA, unary_kernel);

}  // namespace ember::cuda
