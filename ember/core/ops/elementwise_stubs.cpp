// The stub objects of the elementwise family (filled by kernels/).
#include "ember/core/ops/elementwise_kernels.h"

namespace ember {

KernelStub<UnaryKernelFn> unary_stub("unary");
KernelStub<BinaryKernelFn> binary_stub("binary");
KernelStub<CompareKernelFn> compare_stub("compare");
KernelStub<WhereKernelFn> where_stub("where");
KernelStub<CastKernelFn> cast_stub("copy");
KernelStub<FillKernelFn> fill_stub("fill");
KernelStub<ArangeKernelFn> arange_stub("arange");
KernelStub<RandomKernelFn> random_stub("random");
KernelStub<CrossDeviceCopyFn> cross_device_copy_stub("cross-device copy");

}  // namespace ember
