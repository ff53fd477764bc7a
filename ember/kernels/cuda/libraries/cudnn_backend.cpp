// cuDNN's graph (backend) API as ember's cuDNN routes drive it (contract in
// ember/kernels/cuda/libraries/cudnn_backend.h).
#include "ember/kernels/cuda/libraries/cudnn_backend.h"

#include <array>
#include <mutex>

#include "ember/core/cuda/cudnn_check.h"
#include "ember/core/cuda/device.h"
#include "ember/core/cuda/graph.h"
#include "ember/core/error.h"
#include "ember/kernels/cuda/common/workspace.h"

// Operation graphs and execution plans name their handle through attributes
// that cuDNN 9.19 marks deprecated in favour of device-property descriptors;
// every cuDNN 9 has the handle attributes (the H200 machines run 9.14), so
// the warning is silenced, for this file only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace ember::cuda {

// ---------------- descriptors ----------------

Backend::Backend(cudnnBackendDescriptorType_t type) { EMBER_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &desc_)); }

Backend::~Backend() {
  if (desc_ != nullptr) cudnnBackendDestroyDescriptor(desc_);
}

Backend& Backend::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                      const void* values) {
  EMBER_CUDNN_CHECK(cudnnBackendSetAttribute(desc_, name, type, count, values));
  return *this;
}

Backend& Backend::set(cudnnBackendAttributeName_t name, const Backend& child) {
  cudnnBackendDescriptor_t d = child.get();
  return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d);
}

void Backend::finalize() { EMBER_CUDNN_CHECK(cudnnBackendFinalize(desc_)); }

bool Backend::try_finalize(const char* what) {
  const cudnnStatus_t status = cudnnBackendFinalize(desc_);
  if (status == CUDNN_STATUS_SUCCESS) return true;
  if (declined(status)) return false;
  detail::throw_cudnn_error(status, what, __FILE__, __LINE__);
}

bool declined(cudnnStatus_t status) { return status >= 2000 && status < 4000; }

// ---------------- handles ----------------

namespace {

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

ThreadHandles& thread_handles() {
  thread_local ThreadHandles mine;
  return mine;
}

}  // namespace

cudnnHandle_t handle_for(int device, cudaStream_t stream, const char* what) {
  cudnnHandle_t& h = thread_handles().handles[size_t(device)];
  if (h == nullptr) {
    detail::check_not_capturing(device, what,
                                "it takes the thread's cuDNN handle, which may allocate on the device; run the work "
                                "once before capturing");
    h = handle_pool().acquire(device);
  }
  EMBER_CUDNN_CHECK(cudnnSetStream(h, stream));
  return h;
}

bool thread_has_handle(int device) { return thread_handles().handles[size_t(device)] != nullptr; }

// ---------------- graphs and plans ----------------

Backend operation_graph(std::span<const cudnnBackendDescriptor_t> ops, cudnnHandle_t h) {
  Backend graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(ops.size()), ops.data())
      .set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  return graph;
}

namespace {

// The engine configurations cuDNN's heuristics rank for `graph` in `mode`
// (none when the mode has nothing for it).
std::vector<Backend> engine_configs(const Backend& graph, cudnnBackendHeurMode_t mode) {
  Backend heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph)
      .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (!heur.try_finalize("cudnnBackendFinalize(engine heuristics)")) return {};
  int64_t count = 0;
  EMBER_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                             0, &count, nullptr));
  std::vector<Backend> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(configs.back().get());
  }
  EMBER_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                             count, &count, raw.data()));
  configs.erase(configs.begin() + count, configs.end());
  return configs;
}

}  // namespace

RankedPlans ranked_plans(const Backend& graph, cudnnHandle_t h, int device, size_t limit, int64_t extra_bytes,
                         const EngineFilter& accept) {
  RankedPlans ranked;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    for (Backend& config : engine_configs(graph, mode)) {
      if (ranked.plans.size() == limit) return ranked;
      if (!accept(engine_of(config), ranked.plans.size())) continue;
      EnginePlan p;
      cudnnBackendDescriptor_t c = config.get();
      p.plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h)
          .set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
      if (!p.plan.try_finalize("cudnnBackendFinalize(execution plan)")) continue;
      ranked.any_finalized = true;
      int64_t count = 0;
      EMBER_CUDNN_CHECK(cudnnBackendGetAttribute(p.plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                 CUDNN_TYPE_INT64, 1, &count, &p.workspace));
      try {
        const Workspace probe(size_t(p.workspace + extra_bytes), device);  // fits now?
      } catch (const OutOfMemoryError&) {
        continue;
      }
      p.config = std::move(config);
      ranked.plans.push_back(std::move(p));
    }
    if (!ranked.plans.empty()) return ranked;
  }
  return ranked;
}

Backend engine_of(const Backend& config) {
  Backend engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t e = engine.get();
  int64_t count = 0;
  EMBER_CUDNN_CHECK(cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                             1, &count, &e));
  return engine;
}

std::vector<cudnnBackendNumericalNote_t> numerical_notes(const Backend& engine) {
  std::vector<cudnnBackendNumericalNote_t> notes(CUDNN_NUMERICAL_NOTE_TYPE_COUNT);
  int64_t count = 0;
  EMBER_CUDNN_CHECK(cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                             int64_t(notes.size()), &count, notes.data()));
  notes.resize(size_t(count));
  return notes;
}

int64_t engine_index(const Backend& engine) {
  int64_t index = -1, count = 0;
  EMBER_CUDNN_CHECK(
      cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &count, &index));
  return index;
}

Backend variant_pack(std::span<const int64_t> uids, std::span<void* const> pointers, void* workspace) {
  Backend pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(uids.size()), uids.data())
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(pointers.size()), pointers.data())
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  pack.finalize();
  return pack;
}

}  // namespace ember::cuda

#pragma GCC diagnostic pop
