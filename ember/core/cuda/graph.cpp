// Graph: stream capture into a cudaGraph_t, its private memory pool, the
// checks and random-number shifts of each replay (see ember/core/cuda/graph.h).
#include "ember/core/cuda/graph.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "ember/core/autocast_state.h"
#include "ember/core/cuda/cuda_check.h"
#include "ember/core/cuda/device.h"
#include "ember/core/cuda/device_cache.h"
#include "ember/core/cuda/graph_random.h"
#include "ember/core/cuda/index_error.h"
#include "ember/core/cuda/stream.h"
#include "ember/core/error.h"

namespace ember::cuda {

// Random draws of one generator in a capture: Philox blocks [first, end)
// relative to which the captured kernels add the shift.
struct CapturedDraws {
  Generator* generator = nullptr;
  uint64_t seed = 0;
  uint64_t first = 0;
  uint64_t end = 0;
  uint64_t* shift = nullptr;  // device memory of its own: written outside the graph
};

struct Graph::Impl {
  int device = 0;
  cudaStream_t stream = nullptr;  // the capture stream, leased; its blocks are the graph's pool
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  size_t nodes = 0;
  bool replayed = false;
  std::vector<std::function<void()>> checks;
  std::vector<CapturedDraws> draws;
  std::vector<void*> held;  // blocks freed during the capture that replays still use
};

namespace {

// The graph this thread captures on each device, or null.
thread_local Graph::Impl* tls_capture[kMaxDevices] = {};
// Whether any thread captures on the device (one capture per device at a time).
std::atomic<bool> device_capturing[kMaxDevices] = {};

// Capture streams: each live graph leases one, so its blocks in the caching
// allocator are the graph's alone; a reset graph returns its stream.
std::mutex streams_mutex;
std::vector<cudaStream_t> free_streams[kMaxDevices];

cudaStream_t lease_stream(int device) {
  {
    std::lock_guard<std::mutex> lock(streams_mutex);
    if (!free_streams[device].empty()) {
      cudaStream_t s = free_streams[device].back();
      free_streams[device].pop_back();
      return s;
    }
  }
  cudaStream_t s = nullptr;
  EMBER_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));  // never destroyed
  return s;
}

void return_stream(int device, cudaStream_t s) {
  std::lock_guard<std::mutex> lock(streams_mutex);
  free_streams[device].push_back(s);
}

int resolve(int device) {
  if (device == -1) return current_device();
  check_device(device);
  return device;
}

// Frees the blocks a capture held (they go back to their pools).
void free_held(int device, std::vector<void*>& held) {
  for (void* p : held) detail::device_cache(device).free(p);
  held.clear();
}

// Ends this thread's capture on the graph's device: the allocator stops
// holding frees; returns what it held.
std::vector<void*> end_capture_state(Graph::Impl& g) {
  tls_capture[g.device] = nullptr;
  device_capturing[g.device].store(false);
  return detail::device_cache(g.device).end_capture();
}

// Everything a failed or reset capture leaves: back to an empty graph.
void clear(Graph::Impl& g, std::vector<void*> held) {
  if (g.exec != nullptr) cudaGraphExecDestroy(g.exec);
  if (g.graph != nullptr) cudaGraphDestroy(g.graph);
  g.exec = nullptr;
  g.graph = nullptr;
  g.nodes = 0;
  g.replayed = false;
  g.checks.clear();
  for (const CapturedDraws& r : g.draws) cudaFree(r.shift);  // after the device is idle, or nothing ran
  g.draws.clear();
  free_held(g.device, held);
  if (g.stream != nullptr) {
    detail::device_cache(g.device).end_graph_pool(g.stream);
    return_stream(g.device, std::exchange(g.stream, nullptr));
  }
}

}  // namespace

Graph::Graph(int device) : impl_(std::make_unique<Impl>()) { impl_->device = resolve(device); }

Graph::~Graph() {
  try {
    reset();
  } catch (const Error& e) {
    // A destructor cannot throw; the context is lost if waiting failed.
    std::fprintf(stderr, "ember: cuda::Graph destructor: %s\n", e.what());
  }
}

void Graph::capture(const std::function<void()>& work) {
  Impl& g = *impl_;
  const int d = g.device;
  EMBER_CHECK(g.exec == nullptr, "Graph::capture: this graph already holds a capture of "
                                     << g.nodes << " nodes on cuda:" << d << "; call reset() before capturing again");
  EMBER_CHECK(!device_capturing[d].exchange(true),
              "Graph::capture: another graph is being captured on cuda:"
                  << d << " (by this or another thread); captures on one device run one at a time");
  DeviceGuard device_guard(d);
  try {
    prepare_index_checks(d);  // its one wait for the device cannot be captured
    g.stream = lease_stream(d);
  } catch (...) {
    device_capturing[d].store(false);
    throw;
  }
  detail::device_cache(d).begin_capture(g.stream);
  tls_capture[d] = &g;
  cudaGraph_t graph = nullptr;
  try {
    StreamGuard stream_guard(Stream(g.stream, d));
    EMBER_CUDA_CHECK(cudaStreamBeginCapture(g.stream, cudaStreamCaptureModeThreadLocal));
    try {
      work();
    } catch (...) {
      // End the capture so the stream works again; what it recorded is dropped.
      if (cudaStreamEndCapture(g.stream, &graph) != cudaSuccess) cudaGetLastError();
      if (graph != nullptr) cudaGraphDestroy(graph);
      throw;
    }
    const cudaError_t err = cudaStreamEndCapture(g.stream, &graph);
    if (err != cudaSuccess) {
      cudaGetLastError();
      EMBER_FAIL("Graph::capture on cuda:" << d << ": CUDA abandoned the capture (" << cudaGetErrorName(err) << ": "
                                           << cudaGetErrorString(err)
                                           << "): the work made a call that cannot be captured, such as work on "
                                              "another stream not joined back to the capture");
    }
  } catch (...) {
    clear(g, end_capture_state(g));
    throw;
  }
  g.graph = graph;
  std::vector<void*> held = end_capture_state(g);
  try {
    EMBER_CUDA_CHECK(cudaGraphInstantiate(&g.exec, graph, 0));
    EMBER_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &g.nodes));
  } catch (...) {
    clear(g, std::move(held));
    throw;
  }
  g.held = std::move(held);
}

void Graph::replay() {
  Impl& g = *impl_;
  EMBER_CHECK(g.exec != nullptr,
              "Graph::replay: nothing is captured on cuda:" << g.device << "; call capture(work) first");
  EMBER_CHECK(tls_capture[g.device] == nullptr,
              "Graph::replay inside a capture on cuda:" << g.device << ": replay the graph outside capture(work)");
  for (const std::function<void()>& check : g.checks) check();
  autocast_state::invalidate_kept_casts();
  for (const CapturedDraws& r : g.draws) {
    EMBER_CHECK(r.generator->seed() == r.seed, "Graph::replay on cuda:" << g.device << ": a generator the capture drew "
                                                                        << "random numbers from was reseeded (from "
                                                                        << r.seed << " to " << r.generator->seed()
                                                                        << "); capture the graph again after seeding");
  }
  DeviceGuard guard(g.device);
  cudaStream_t stream = current_stream(g.device).handle();
  for (const CapturedDraws& r : g.draws) {
    const GeneratorState fresh = r.generator->reserve(r.end - r.first);
    detail::store_shift_async(r.shift, fresh.offset - r.first, stream);
  }
  EMBER_CUDA_CHECK(cudaGraphLaunch(g.exec, stream));
  g.replayed = true;
  if (detail::launch_blocking()) {
    EMBER_CUDA_CHECK(cudaStreamSynchronize(stream));
    raise_pending_index_error();
  }
}

void Graph::reset() {
  Impl& g = *impl_;
  if (g.exec == nullptr) return;
  if (g.replayed) {
    // A replay may still run: its memory is reused once the graph is gone.
    DeviceGuard guard(g.device);
    EMBER_CUDA_CHECK(cudaDeviceSynchronize());
  }
  clear(g, std::exchange(g.held, {}));
}

bool Graph::captured() const { return impl_->exec != nullptr; }
int Graph::device() const { return impl_->device; }
size_t Graph::num_nodes() const { return impl_->nodes; }

bool is_capturing(int device) { return tls_capture[resolve(device)] != nullptr; }

namespace detail {

void check_not_capturing(int device, const char* what, const char* why) {
  if (tls_capture[device] == nullptr) [[likely]]
    return;
  EMBER_FAIL(what << " cannot run while a CUDA graph is captured on cuda:" << device << " (cuda::Graph::capture): "
                  << why << ". Move it out of the captured work; the capture was abandoned");
}

void add_replay_check(int device, std::function<void()> check) {
  Graph::Impl* g = tls_capture[device];
  if (g != nullptr) g->checks.push_back(std::move(check));
}

const uint64_t* captured_random_shift(int device, Generator& generator, const GeneratorState& state, uint64_t blocks) {
  Graph::Impl* g = tls_capture[device];
  if (g == nullptr) [[likely]]
    return nullptr;
  for (CapturedDraws& r : g->draws) {
    if (r.generator != &generator) continue;
    // Activation checkpointing restores a state and draws again: the range
    // covers every draw of the capture.
    r.first = std::min(r.first, state.offset);
    r.end = std::max(r.end, state.offset + blocks);
    return r.shift;
  }
  CapturedDraws r;
  r.generator = &generator;
  r.seed = state.seed;
  r.first = state.offset;
  r.end = state.offset + blocks;
  // Not from the caching allocator: under allocation poisoning its fill
  // would be captured and overwrite the shift inside every replay.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  EMBER_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  const cudaError_t err = cudaMalloc(reinterpret_cast<void**>(&r.shift), sizeof(uint64_t));
  cudaThreadExchangeStreamCaptureMode(&mode);
  EMBER_CUDA_CHECK(err);
  g->draws.push_back(r);
  return r.shift;
}

}  // namespace detail
}  // namespace ember::cuda
