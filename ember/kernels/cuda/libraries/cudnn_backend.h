// cuDNN's graph (backend) API as ember's cuDNN routes drive it: convolution
// (ember/kernels/cuda/libraries/cudnn_conv.cpp) and fused attention
// (ember/kernels/cuda/libraries/cudnn_attention.cpp). Internal header: it
// includes cudnn.h, so only those .cpp files include it.
//
// Contract:
// - Backend owns one backend descriptor and destroys it with itself. set()
//   throws an ember::Error naming cuDNN's status when cuDNN rejects an
//   attribute; finalize() throws on any failed finalize, try_finalize()
//   returns false where cuDNN declines (see declined()) and throws otherwise.
//   cuDNN keeps references to the descriptors a descriptor is given, not
//   copies: the owner keeps them alive as long as the one that refers to them.
// - handle_for(device, stream, what) returns this host thread's handle for
//   `device` (the current device), bound to `stream`. A thread's first call
//   on a device takes a handle that an ended thread gave back, or creates
//   one; while the thread captures a CUDA graph on the device that first
//   call is an ember::Error naming `what` (a new handle may allocate on the
//   device). Handles live as long as the process. thread_has_handle(device)
//   says whether this thread has taken its handle for `device`.
// - declined(status): cuDNN declines an engine or a configuration
//   (NOT_SUPPORTED or BAD_PARAM families), which is not a failure.
// - operation_graph(ops, h): an operation graph of the operations, in order,
//   on handle h, not yet finalized.
// - ranked_plans(graph, h, device, limit, extra_bytes, accept) returns up to
//   `limit` execution plans of the finalized `graph` in the order cuDNN's
//   heuristics rank their engine configurations (mode A, then its fallback
//   list when mode A gave no plan), each of an engine that accept(engine,
//   plans taken so far) takes, that finalizes on h, and whose workspace plus
//   `extra_bytes` the caching allocator on `device` can provide now; and
//   whether any configuration finalized at all (false: cuDNN has no engine
//   for the graph here, as opposed to none whose workspace fits).
// - engine_of(config), numerical_notes(engine), engine_index(engine): what a
//   configuration runs and what cuDNN says of that engine's arithmetic.
// - variant_pack(uids, pointers, workspace): the data pointers of one
//   execution, by tensor unique id (a by-value scalar's pointer is a host
//   pointer to its value, read during cudnnBackendExecute).
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

namespace ember::cuda {

class Backend {
 public:
  explicit Backend(cudnnBackendDescriptorType_t type);
  ~Backend();
  Backend(Backend&& other) noexcept : desc_(other.desc_) { other.desc_ = nullptr; }
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;
  Backend& operator=(Backend&& other) noexcept {
    std::swap(desc_, other.desc_);
    return *this;
  }

  cudnnBackendDescriptor_t get() const { return desc_; }
  Backend& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* values);
  Backend& set(cudnnBackendAttributeName_t name, const Backend& child);
  void finalize();
  bool try_finalize(const char* what);

 private:
  cudnnBackendDescriptor_t desc_ = nullptr;
};

cudnnHandle_t handle_for(int device, cudaStream_t stream, const char* what);
bool thread_has_handle(int device);

bool declined(cudnnStatus_t status);

Backend operation_graph(std::span<const cudnnBackendDescriptor_t> ops, cudnnHandle_t h);

struct EnginePlan {
  Backend config{CUDNN_BACKEND_ENGINECFG_DESCRIPTOR};
  Backend plan{CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR};
  int64_t workspace = 0;  // bytes
};

struct RankedPlans {
  std::vector<EnginePlan> plans;
  bool any_finalized = false;
};

using EngineFilter = std::function<bool(const Backend& engine, size_t taken)>;

RankedPlans ranked_plans(const Backend& graph, cudnnHandle_t h, int device, size_t limit, int64_t extra_bytes,
                         const EngineFilter& accept);

Backend engine_of(const Backend& config);
std::vector<cudnnBackendNumericalNote_t> numerical_notes(const Backend& engine);
int64_t engine_index(const Backend& engine);

Backend variant_pack(std::span<const int64_t> uids, std::span<void* const> pointers, void* workspace);

}  // namespace ember::cuda
