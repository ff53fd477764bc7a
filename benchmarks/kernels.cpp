// benchmarks/kernels: achieved bandwidth of ember's CUDA kernels against the
// device-to-device copy bandwidth measured in the same run, and matmul
// against cuBLAS called directly the way PyTorch calls it.
//
// Each figure is the median of `repeats` timings with CUDA events, after a
// warm-up, on tensors of about 1 GiB (memory-bound ops) so caches do not
// flatter the result. Bytes count each input read once and each output
// written once. Run benchmarks/torch_reference.py for PyTorch's figures on
// the same card.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "ember/ember.h"

#if defined(EMBER_WITH_CUDA)
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "ember/core/cuda/device.h"
#include "ember/core/cuda/event.h"
#include "ember/core/cuda/stream.h"

using namespace ember;

namespace {

constexpr int kRepeats = 20;

double median_ms(const std::function<void()>& fn, int repeats = kRepeats) {
  for (int i = 0; i < 3; ++i) fn();
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    cuda::Event start(true), stop(true);
    start.record();
    fn();
    stop.record();
    stop.synchronize();
    times.push_back(start.elapsed_time(stop));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(std::string(what) + ": " + cudaGetErrorString(e));
}

struct Row {
  std::string op, shape;
  double ms, gbps;
};

void print_bandwidth_table(const std::vector<Row>& rows, double copy_gbps) {
  std::printf("\n| op | shape | time (ms) | GB/s | of copy |\n|---|---|---:|---:|---:|\n");
  for (const Row& r : rows) {
    std::printf("| %s | %s | %.3f | %.0f | %.1f%% |\n", r.op.c_str(), r.shape.c_str(), r.ms, r.gbps,
                100.0 * r.gbps / copy_gbps);
  }
}

double gemm_tflops(int64_t n, double ms) { return 2.0 * double(n) * n * n / (ms * 1e-3) / 1e12; }

}  // namespace

int main() {
  if (!cuda::is_available()) {
    std::printf("kernels: no CUDA device, nothing to measure\n");
    return 0;
  }
  const cuda::DeviceProperties& p = cuda::properties(0);
  std::printf("device: %s, %d SMs, %.1f GiB\n", p.name.c_str(), p.multiprocessor_count,
              double(p.total_memory) / (1 << 30));
  Device dev = cuda_device(0);
  const int64_t n = int64_t(1) << 28;  // 256M elements: 1 GiB of float32

  // Ceiling: device-to-device copy of 1 GiB (bytes read + written).
  Tensor src = rand({n}, DType::Float32, dev), dst = empty({n}, DType::Float32, dev);
  double copy_ms = median_ms([&] {
    check(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), size_t(n) * 4, cudaMemcpyDeviceToDevice,
                          cuda::current_stream(0).handle()),
          "cudaMemcpyAsync");
  });
  double copy_gbps = 2.0 * n * 4 / (copy_ms * 1e-3) / 1e9;
  std::printf("device-to-device copy: %.3f ms, %.0f GB/s (the ceiling below)\n", copy_ms, copy_gbps);

  std::vector<Row> rows;
  auto add_row = [&](const std::string& op, const std::string& shape, double bytes, const std::function<void()>& fn) {
    double ms = median_ms(fn);
    rows.push_back({op, shape, ms, bytes / (ms * 1e-3) / 1e9});
  };
  Tensor a = randn({n}, DType::Float32, dev), b = randn({n}, DType::Float32, dev);
  Tensor out;
  add_row("add", "[256M] f32", 3.0 * n * 4, [&] { out = a + b; });
  add_row("mul scalar", "[256M] f32", 2.0 * n * 4, [&] { out = a * 1.5f; });
  add_row("relu", "[256M] f32", 2.0 * n * 4, [&] { out = relu(a); });
  add_row("add_ (in place)", "[256M] f32", 3.0 * n * 4, [&] { a.add_(b); });
  add_row("cast f32->bf16", "[256M]", double(n) * (4 + 2), [&] { out = a.to(DType::BFloat16); });
  Tensor h = a.to(DType::Float16), h2 = b.to(DType::Float16);
  add_row("add", "[256M] f16", 3.0 * n * 2, [&] { out = h + h2; });
  add_row("add broadcast row", "[32768, 8192] + [8192] f32", 2.0 * n * 4,
          [&, row = randn({8192}, DType::Float32, dev)] {
            out = a.view({32768, 8192}) + row;
          });
  add_row("add transposed", "[16384, 16384]^T f32", 3.0 * n * 4, [&] {
    out = a.view({16384, 16384}).t() + b.view({16384, 16384});
  });
  Tensor m = randn({8192, 8192}, DType::Float32, dev);
  const double mbytes = 8192.0 * 8192 * 4;
  add_row("sum rows", "[32768, 8192] f32", double(n) * 4, [&] { out = sum(a.view({32768, 8192}), {1}); });
  add_row("sum cols", "[32768, 8192] f32", double(n) * 4, [&] { out = sum(a.view({32768, 8192}), {0}); });
  add_row("softmax", "[8192, 8192] f32", 2 * mbytes, [&] { out = softmax(m, 1); });
  add_row("log_softmax", "[8192, 8192] f32", 2 * mbytes, [&] { out = log_softmax(m, 1); });
  add_row("layer_norm", "[8192, 8192] f32", 2 * mbytes, [&] { out = layer_norm(m, {8192}); });
  print_bandwidth_table(rows, copy_gbps);

  // Matmul: ember against cuBLAS called directly (cublasGemmEx, column-major
  // with swapped operands, as PyTorch does for row-major tensors).
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) throw Error("cublasCreate failed");
  cublasSetStream(handle, cuda::current_stream(0).handle());
  std::printf(
      "\n| matmul 4096^3 | ember (ms) | cuBLAS (ms) | ember TFLOP/s | cuBLAS TFLOP/s | ember / cuBLAS |\n"
      "|---|---:|---:|---:|---:|---:|\n");
  const int64_t s = 4096;
  for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16}) {
    Tensor x = randn({s, s}, DType::Float32, dev).to(dt), y = randn({s, s}, DType::Float32, dev).to(dt);
    Tensor z = empty({s, s}, dt, dev);
    double ember_ms = median_ms([&] { out = matmul(x, y); });
    cudaDataType_t ct = dt == DType::Float32 ? CUDA_R_32F : dt == DType::Float16 ? CUDA_R_16F : CUDA_R_16BF;
    float alpha = 1, beta = 0;
    cublasSetMathMode(handle, dt == DType::Float32 ? CUBLAS_PEDANTIC_MATH : CUBLAS_DEFAULT_MATH);
    double cublas_ms = median_ms([&] {
      if (cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, int(s), int(s), int(s), &alpha, y.data_ptr(), ct, int(s),
                       x.data_ptr(), ct, int(s), &beta, z.data_ptr(), ct, int(s), CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS) {
        throw Error("cublasGemmEx failed");
      }
    });
    std::printf("| %s | %.3f | %.3f | %.1f | %.1f | %.3f |\n", dtype_name(dt), ember_ms, cublas_ms,
                gemm_tflops(s, ember_ms), gemm_tflops(s, cublas_ms), cublas_ms / ember_ms);
  }
  cublasDestroy(handle);

  // Host overhead of a small op: enqueue cost per 16-element add, measured
  // on the host while the GPU keeps up.
  Tensor t16 = randn({16}, DType::Float32, dev), u16 = randn({16}, DType::Float32, dev);
  for (int i = 0; i < 1000; ++i) out = t16 + u16;
  cuda::synchronize(0);
  std::vector<double> per_op;
  for (int rep = 0; rep < 10; ++rep) {
    const int ops = 2000;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < ops; ++i) out = t16 + u16;
    auto t1 = std::chrono::steady_clock::now();
    cuda::synchronize(0);
    per_op.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / ops);
  }
  std::sort(per_op.begin(), per_op.end());
  std::printf("\nhost overhead of a 16-element CUDA add: %.2f us per op (median of 10 x 2000)\n", per_op[5]);
  return 0;
}

#else

int main() {
  std::printf("kernels: ember was built without CUDA; nothing to measure\n");
  return 0;
}

#endif
