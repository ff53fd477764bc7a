// conv2d through cuDNN's legacy convolution API (see
// kernels/cuda/cudnn_conv.h for the launchers and
// core/ops/conv_kernels.h for the contract).
//
// - Handles: one per (device, host thread), created on first use and bound
//   to the thread's current stream at every call. When a thread ends, its
//   handles go back to a pool that later threads take from, so threads that
//   come and go do not leak handles.
// - Algorithms: cudnnGet*Algorithm_v7 ranks the algorithms by heuristics;
//   the first that succeeds and whose workspace the caching allocator can
//   provide is kept in a map keyed by (shapes, stride, padding, dilation,
//   groups, dtype, device, direction, TF32 switch), so each configuration
//   is chosen once per process.
// - Math: float16 and bfloat16 data compute in float (tensor cores allowed);
//   float32 is restricted to FMA math unless allow_tf32(); float64 computes
//   in double, which cuDNN's legacy API supports with its non-tensor-core
//   algorithms.
// - Workspace: a byte tensor (DType::Bool, one byte per element) from the
//   caching allocator on the current stream, freed when the call returns:
//   the stream orders its reuse after the convolution.
// - Bias: added after the forward and summed for its gradient by the
//   kernels of kernels/cuda/conv_bias.h (every dtype, float sums).
#include "kernels/cuda/cudnn_conv.h"

#include "kernels/cuda/conv_bias.h"

// cuDNN 9 marks the legacy convolution API deprecated in favour of its graph
// API. This file is the one place that uses it, by design (the graph API
// replaces the file later), so the warning is silenced here and only here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#include <cudnn.h>

#include <array>
#include <climits>
#include <map>
#include <mutex>
#include <sstream>
#include <vector>

#include "core/cuda/cudnn_check.h"
#include "core/cuda/device.h"
#include "core/cuda/stream.h"
#include "core/ops.h"

namespace ember::cuda {
namespace {

// ---------------- handles ----------------

class HandlePool {
 public:
  // A free handle of `device` (the current device), or a new one.
  cudnnHandle_t acquire(int device) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::vector<cudnnHandle_t>& free = free_[size_t(device)];
      if (!free.empty()) {
        cudnnHandle_t h = free.back();
        free.pop_back();
        return h;
      }
    }
    cudnnHandle_t h = nullptr;
    EMBER_CUDNN_CHECK(cudnnCreate(&h));
    return h;
  }
  void release(int device, cudnnHandle_t h) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_[size_t(device)].push_back(h);
  }

 private:
  std::mutex mutex_;
  std::array<std::vector<cudnnHandle_t>, kMaxDevices> free_;
};

// Never destroyed: threads hand their handles back during static destruction.
HandlePool& handle_pool() {
  static HandlePool* pool = new HandlePool;
  return *pool;
}

struct ThreadHandles {
  std::array<cudnnHandle_t, kMaxDevices> handles{};
  ~ThreadHandles() {
    for (size_t d = 0; d < handles.size(); ++d) {
      if (handles[d] != nullptr) handle_pool().release(int(d), handles[d]);
    }
  }
};

// This thread's handle for `device` (already current), on its current stream.
cudnnHandle_t handle_for(int device) {
  thread_local ThreadHandles mine;
  cudnnHandle_t& h = mine.handles[size_t(device)];
  if (h == nullptr) h = handle_pool().acquire(device);
  EMBER_CUDNN_CHECK(cudnnSetStream(h, current_stream(device).handle()));
  return h;
}

// ---------------- descriptors ----------------

template <typename D, cudnnStatus_t (*Create)(D*), cudnnStatus_t (*Destroy)(D)>
class Descriptor {
 public:
  Descriptor() { EMBER_CUDNN_CHECK(Create(&desc_)); }
  ~Descriptor() { Destroy(desc_); }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  operator D() const { return desc_; }

 private:
  D desc_ = nullptr;
};

using TensorDescriptor = Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDescriptor = Descriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvolutionDescriptor =
    Descriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;

cudnnDataType_t data_type(DType t) {
  switch (t) {
    case DType::Float32: return CUDNN_DATA_FLOAT;
    case DType::Float64: return CUDNN_DATA_DOUBLE;
    case DType::Float16: return CUDNN_DATA_HALF;
    case DType::BFloat16: return CUDNN_DATA_BFLOAT16;
    default: break;
  }
  EMBER_FAIL("conv2d: cuDNN convolutions take float32, float64, float16 or bfloat16, not " << dtype_name(t));
}

std::string shapes_str(const ConvArgs& a) {
  return "input " + shape_str({a.n, a.c_in, a.h, a.w}) + ", weight " +
         shape_str({a.c_out, a.c_in / a.groups, a.kernel_h, a.kernel_w}) + ", output " +
         shape_str({a.n, a.c_out, a.out_h, a.out_w}) + ", " + dtype_name(a.dtype);
}

// cuDNN's 4-D descriptors hold 32-bit sizes and strides.
void check_fits_32_bits(const ConvArgs& a) {
  for (int64_t numel : {a.n * a.c_in * a.h * a.w, a.n * a.c_out * a.out_h * a.out_w,
                        a.c_out * (a.c_in / a.groups) * a.kernel_h * a.kernel_w}) {
    EMBER_CHECK(numel <= INT_MAX, "conv2d: a tensor of " << numel << " elements (" << shapes_str(a)
                                                         << ") is beyond the 32-bit sizes of cuDNN's 4-D descriptors; "
                                                            "split the batch into smaller convolutions");
  }
}

// The descriptors of one convolution, its math type set as the dtype allows.
struct Descriptors {
  TensorDescriptor x, y;
  FilterDescriptor w;
  ConvolutionDescriptor conv;

  explicit Descriptors(const ConvArgs& a) {
    check_fits_32_bits(a);
    const cudnnDataType_t type = data_type(a.dtype);
    EMBER_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, type, int(a.n), int(a.c_in), int(a.h), int(a.w)));
    EMBER_CUDNN_CHECK(
        cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, type, int(a.n), int(a.c_out), int(a.out_h), int(a.out_w)));
    EMBER_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w, type, CUDNN_TENSOR_NCHW, int(a.c_out), int(a.c_in / a.groups),
                                                 int(a.kernel_h), int(a.kernel_w)));
    cudnnDataType_t compute = a.dtype == DType::Float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    EMBER_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv, int(a.padding_h), int(a.padding_w), int(a.stride_h),
                                                      int(a.stride_w), int(a.dilation_h), int(a.dilation_w),
                                                      CUDNN_CROSS_CORRELATION, compute));
    EMBER_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv, int(a.groups)));
    EMBER_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, default_math(a.dtype)));
  }

  static cudnnMathType_t default_math(DType t) {
    if (t == DType::Float16 || t == DType::BFloat16) return CUDNN_TENSOR_OP_MATH;
    if (t == DType::Float32 && !allow_tf32()) return CUDNN_FMA_MATH;
    return CUDNN_DEFAULT_MATH;
  }
};

// alpha = 1 and beta = 0 or 1 in the type cuDNN reads them as: double for
// double data, float otherwise.
struct Scale {
  double d;
  float f;
  const void* of(DType t) const { return t == DType::Float64 ? static_cast<const void*>(&d) : &f; }
};
constexpr Scale kOne{1.0, 1.0f}, kZero{0.0, 0.0f};

// ---------------- algorithm choice ----------------

enum class Direction : int64_t { Forward, BackwardData, BackwardFilter };

struct AlgoChoice {
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t workspace = 0;
};

using AlgoKey = std::array<int64_t, 18>;

AlgoKey algo_key(const ConvArgs& a, Direction dir) {
  return {a.n,        a.c_in,      a.h,          a.w,          a.c_out,      a.kernel_h,
          a.kernel_w, a.stride_h,  a.stride_w,   a.padding_h,  a.padding_w,  a.dilation_h,
          a.dilation_w, a.groups, int64_t(a.dtype), a.device, int64_t(dir), int64_t(allow_tf32())};
}

class AlgoCache {
 public:
  bool find(const AlgoKey& key, AlgoChoice& out) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = map_.find(key);
    if (it == map_.end()) return false;
    out = it->second;
    return true;
  }
  void insert(const AlgoKey& key, const AlgoChoice& choice) {
    std::lock_guard<std::mutex> lock(mutex_);
    map_.emplace(key, choice);
  }

 private:
  std::mutex mutex_;
  std::map<AlgoKey, AlgoChoice> map_;
};

AlgoCache& algo_cache() {
  static AlgoCache* cache = new AlgoCache;
  return *cache;
}

Tensor workspace(size_t bytes, int device) {
  return bytes == 0 ? Tensor() : empty({int64_t(bytes)}, DType::Bool, cuda_device(device));
}

void* workspace_ptr(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

const char* direction_name(Direction dir) {
  switch (dir) {
    case Direction::Forward: return "forward";
    case Direction::BackwardData: return "backward-data";
    case Direction::BackwardFilter: return "backward-filter";
  }
  return "";
}

// The first of cuDNN's ranked candidates that it can run here: status
// success, a workspace size it reports for the descriptors with the
// candidate's math type, and a workspace the allocator can provide.
// workspace_size(algo, &bytes) asks cuDNN for the candidate's workspace.
template <typename Perf, typename WorkspaceSize>
AlgoChoice pick(const ConvArgs& a, Direction dir, Descriptors& d, const Perf* perf, int count,
                WorkspaceSize workspace_size) {
  bool any_supported = false;
  for (int i = 0; i < count; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    AlgoChoice c;
    c.algo = int(perf[i].algo);
    // A float32 convolution without allow_tf32() must not use tensor cores,
    // whatever math type the heuristics report for the algorithm.
    c.math = a.dtype == DType::Float32 && !allow_tf32() ? CUDNN_FMA_MATH : perf[i].mathType;
    if (cudnnSetConvolutionMathType(d.conv, c.math) != CUDNN_STATUS_SUCCESS) continue;
    if (workspace_size(perf[i].algo, &c.workspace) != CUDNN_STATUS_SUCCESS) continue;
    any_supported = true;
    try {
      workspace(c.workspace, a.device);
    } catch (const OutOfMemoryError&) {
      continue;
    }
    return c;
  }
  std::ostringstream what;
  what << shapes_str(a) << ", stride (" << a.stride_h << ", " << a.stride_w << "), padding (" << a.padding_h << ", "
       << a.padding_w << "), dilation (" << a.dilation_h << ", " << a.dilation_w << "), groups " << a.groups;
  EMBER_CHECK(any_supported, "conv2d: cuDNN has no " << direction_name(dir) << " algorithm for " << what.str()
                                                     << " on this GPU; use float32 or float16");
  EMBER_FAIL("conv2d: the workspace of every cuDNN " << direction_name(dir) << " algorithm for " << what.str()
                                                     << " is larger than the free device memory; use a smaller batch");
}

AlgoChoice choose(const ConvArgs& a, Direction dir, cudnnHandle_t h, Descriptors& d) {
  AlgoKey key = algo_key(a, dir);
  AlgoChoice c;
  if (algo_cache().find(key, c)) return c;
  switch (dir) {
    case Direction::Forward: {
      std::array<cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT> perf;
      int count = 0;
      EMBER_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, int(perf.size()), &count,
                                                               perf.data()));
      c = pick(a, dir, d, perf.data(), count, [&](cudnnConvolutionFwdAlgo_t algo, size_t* bytes) {
        return cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y, algo, bytes);
      });
      break;
    }
    case Direction::BackwardData: {
      std::array<cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT> perf;
      int count = 0;
      EMBER_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, int(perf.size()),
                                                                    &count, perf.data()));
      c = pick(a, dir, d, perf.data(), count, [&](cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
        return cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w, d.y, d.conv, d.x, algo, bytes);
      });
      break;
    }
    case Direction::BackwardFilter: {
      std::array<cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT> perf;
      int count = 0;
      EMBER_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w, int(perf.size()),
                                                                      &count, perf.data()));
      c = pick(a, dir, d, perf.data(), count, [&](cudnnConvolutionBwdFilterAlgo_t algo, size_t* bytes) {
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x, d.y, d.conv, d.w, algo, bytes);
      });
      break;
    }
  }
  algo_cache().insert(key, c);
  return c;
}

}  // namespace

void cudnn_conv_forward(const ConvArgs& a) {
  DeviceGuard guard(a.device);
  cudnnHandle_t h = handle_for(a.device);
  Descriptors d(a);
  AlgoChoice c = choose(a, Direction::Forward, h, d);
  EMBER_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, c.math));
  Tensor ws = workspace(c.workspace, a.device);
  EMBER_CUDNN_CHECK(cudnnConvolutionForward(h, kOne.of(a.dtype), d.x, a.input, d.w, a.weight, d.conv,
                                            cudnnConvolutionFwdAlgo_t(c.algo), workspace_ptr(ws), c.workspace,
                                            kZero.of(a.dtype), d.y, a.output));
  if (a.bias) conv_bias_add(a);
}

void cudnn_conv_backward_data(const ConvArgs& a) {
  DeviceGuard guard(a.device);
  cudnnHandle_t h = handle_for(a.device);
  Descriptors d(a);
  AlgoChoice c = choose(a, Direction::BackwardData, h, d);
  EMBER_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, c.math));
  Tensor ws = workspace(c.workspace, a.device);
  EMBER_CUDNN_CHECK(cudnnConvolutionBackwardData(h, kOne.of(a.dtype), d.w, a.weight, d.y, a.grad_output, d.conv,
                                                 cudnnConvolutionBwdDataAlgo_t(c.algo), workspace_ptr(ws), c.workspace,
                                                 kZero.of(a.dtype), d.x, a.grad_input));
}

void cudnn_conv_backward_filter(const ConvArgs& a) {
  DeviceGuard guard(a.device);
  if (a.grad_weight) {
    cudnnHandle_t h = handle_for(a.device);
    Descriptors d(a);
    AlgoChoice c = choose(a, Direction::BackwardFilter, h, d);
    EMBER_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, c.math));
    Tensor ws = workspace(c.workspace, a.device);
    EMBER_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, kOne.of(a.dtype), d.x, a.input, d.y, a.grad_output, d.conv,
                                                     cudnnConvolutionBwdFilterAlgo_t(c.algo), workspace_ptr(ws),
                                                     c.workspace, kZero.of(a.dtype), d.w, a.grad_weight));
  }
  if (a.grad_bias) conv_bias_grad(a);
}

EMBER_REGISTER_KERNEL(conv2d_forward_stub, DeviceType::CUDA, cudnn_conv_forward);
EMBER_REGISTER_KERNEL(conv2d_backward_input_stub, DeviceType::CUDA, cudnn_conv_backward_data);
EMBER_REGISTER_KERNEL(conv2d_backward_weight_stub, DeviceType::CUDA, cudnn_conv_backward_filter);

}  // namespace ember::cuda

#pragma GCC diagnostic pop
