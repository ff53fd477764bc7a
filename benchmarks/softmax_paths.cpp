// benchmarks/softmax_paths: every CUDA softmax kernel timed against the
// others on one shape, forward and backward, as llm.c's dev/cuda harness
// times a kernel's versions. Each path is forced (ember/kernels/cuda/softmax_path.h);
// "auto" is the shape's own choice, so the table shows whether the choice
// is the fastest path. A path that cannot take a shape prints "-".
//
// Rows are float32 and bfloat16 [rows, dim] with the softmax over dim, about
// 256 MiB of input each, so caches do not flatter the figures. Each figure is
// the median of 20 timings between CUDA events after a warm-up; bytes count
// x read and y written (forward) or y and dL/dy read and dL/dx written
// (backward), against the device-to-device copy measured in the same run.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "ember/ember.h"

#if defined(EMBER_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "benchmarks/bench_util.h"
#include "ember/core/cuda/device.h"
#include "ember/core/cuda/stream.h"
#include "ember/core/ops/softmax_kernels.h"
#include "ember/kernels/cuda/softmax_path.h"

using namespace ember;

namespace {

// The median of 20 timings between CUDA events after 3 warm-up runs.
double median_ms(const std::function<void()>& fn) {
  return bench::median(bench::time_steps(cuda_device(0), 3, 20, fn));
}

const cuda::SoftmaxPath kPaths[] = {cuda::SoftmaxPath::Auto,   cuda::SoftmaxPath::Warp,   cuda::SoftmaxPath::Register,
                                    cuda::SoftmaxPath::Cached, cuda::SoftmaxPath::Online, cuda::SoftmaxPath::Strided};

// The GB/s of one path on one direction, or a negative number when the path
// cannot take the shape.
double path_gbps(cuda::SoftmaxPath path, SoftmaxKind kind, const SoftmaxArgs& args, double bytes) {
  const cuda::SoftmaxPath before = cuda::force_softmax_path(path);
  double gbps = -1;
  try {
    gbps = bytes / (median_ms([&] { softmax_stub(DeviceType::CUDA)(kind, args); }) * 1e-3) / 1e9;
  } catch (const Error&) {
    // the forced path declined this shape before launching anything
  }
  cuda::force_softmax_path(before);
  return gbps;
}

}  // namespace

int main() {
  if (!cuda::is_available()) {
    std::printf("softmax_paths: no CUDA device, nothing to measure\n");
    return 0;
  }
  const cuda::DeviceProperties& p = cuda::properties(0);
  const Device dev = cuda_device(0);
  const int64_t total = int64_t(1) << 26;  // elements per tensor: 256 MiB of float32
  Tensor src = rand({total}, DType::Float32, dev), dst = empty({total}, DType::Float32, dev);
  const double copy_ms = median_ms([&] {
    if (cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), size_t(total) * 4, cudaMemcpyDeviceToDevice,
                        cuda::current_stream(0).handle()) != cudaSuccess) {
      throw Error("softmax_paths: cudaMemcpyAsync failed");
    }
  });
  const double copy_gbps = 2.0 * double(total) * 4 / (copy_ms * 1e-3) / 1e9;
  std::printf(
      "device: %s; device-to-device copy %.0f GB/s (the ceiling)\n\nGB/s of each forced path "
      "(%% of copy); - where the path cannot take the shape\n\n| dtype | [rows, dim] | direction |",
      p.name.c_str(), copy_gbps);
  for (cuda::SoftmaxPath path : kPaths) std::printf(" %s |", cuda::softmax_path_name(path));
  std::printf("\n|---|---|---|");
  for (size_t i = 0; i < std::size(kPaths); ++i) std::printf("---:|");
  std::printf("\n");

  for (DType dtype : {DType::Float32, DType::BFloat16}) {
    for (int64_t dim :
         {int64_t(64), int64_t(768), int64_t(1024), int64_t(4096), int64_t(8192), int64_t(32768), int64_t(262144)}) {
      const int64_t rows = total / dim;
      Tensor x = randn({rows, dim}, DType::Float32, dev).to(dtype);
      Tensor y = softmax(x, 1), g = randn({rows, dim}, DType::Float32, dev).to(dtype);
      Tensor out = empty({rows, dim}, dtype, dev);
      const double bytes = double(x.numel()) * double(dtype_size(dtype));
      for (const bool backward : {false, true}) {
        SoftmaxArgs a;
        a.in = backward ? y.data_ptr() : x.data_ptr();
        a.grad = backward ? g.data_ptr() : nullptr;
        a.out = out.data_ptr();
        a.outer = rows;
        a.dim = dim;
        a.dtype = dtype;
        std::printf("| %s | [%lld, %lld] | %s |", dtype_name(dtype), (long long)rows, (long long)dim,
                    backward ? "backward" : "forward");
        for (cuda::SoftmaxPath path : kPaths) {
          const double gbps = path_gbps(path, backward ? SoftmaxKind::SoftmaxBackward : SoftmaxKind::Softmax, a,
                                        (backward ? 3 : 2) * bytes);
          if (gbps < 0) std::printf(" - |");
          else std::printf(" %.0f (%.0f%%) |", gbps, 100 * gbps / copy_gbps);
        }
        std::printf("\n");
      }
    }
  }
  return 0;
}

#else

int main() {
  std::printf("softmax_paths: ember was built without CUDA; nothing to measure\n");
  return 0;
}

#endif
