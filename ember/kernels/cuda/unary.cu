// CUDA kernels of the unary elementwise ops (math in ember/kernels/elementwise_math.h).
#include "ember/core/ops/elementwise_kernels.h"
#include "ember/kernels/cuda/common/elementwise_launch.cuh"
#include "ember/kernels/elementwise_math.h"

namespace ember::cuda {
namespace {

template <UnaryOp OP, typename A>
struct UnaryFn {
  __device__ A operator()(A x) const { return math::unary<OP>(x); }
};

void unary_kernel(UnaryOp op, const ElementwiseArgs& args, DType dtype) {
  EMBER_DISPATCH_DTYPE(dtype, "unary", [&]<typename T>() {
    EMBER_SWITCH_UNARY_OP(op, OP, {
      if constexpr (math::unary_supported<OP, T>()) {
        launch_map<T, T>(args, UnaryFn<OP, acc_t<T>>{});
      } else {
        EMBER_FAIL("unary op " << int(op) << " has no kernel for dtype " << dtype_name(dtype));
      }
    });
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(unary_stub, DeviceType::CUDA, unary_kernel);

}  // namespace ember::cuda
