// conv2d through cuDNN's graph (backend) API (see ember/kernels/cuda/libraries/cudnn_conv.h
// for the launchers and ember/core/ops/conv_kernels.h for the contract).
//
// - Handles: one per (device, host thread)
//   (ember/kernels/cuda/libraries/cudnn_backend.h), taken at the thread's first
//   convolution on the device (an ember::Error while the thread captures a
//   CUDA graph there: a new handle allocates on the device) and bound to the
//   thread's current stream at every call. When a thread ends, its handles
//   go back to a pool that later threads take from, so threads that come and
//   go do not leak handles.
// - Plans: each direction (forward, backward-data, backward-filter) of a
//   configuration (shapes, stride, padding, dilation, groups, dtype, memory
//   format, the alignment of each data pointer, TF32 switch) on a handle is
//   one operation graph of one convolution node. The memory format is NCHW,
//   or channels-last: NHWC tensors, the layout of the tensor-core engines of
//   the half types, which then need no layout transposes around them (an
//   engine of another layout, as cuDNN picks for some float32 and
//   one-channel cases, transposes inside the plan). Its execution plan is made at
//   the first call (a capture may make it): cuDNN's heuristics (mode A,
//   then its fallback list) rank the engine configurations, and those whose
//   numerics the dtype allows, that finalize, and whose workspace the
//   caching allocator can provide are the candidates. The first is kept,
//   or with conv_autotune() on (ember/core/ops.h) and no capture under way, the
//   fastest of the first eight run on the call's tensors, counting the
//   host's launches (ember/kernels/cuda/libraries/fastest_candidate.h): at these small sizes
//   an engine that adds layout transposes or a split-K reduction costs a
//   step more host time than its kernel saves. The plan is kept in a map
//   for the life of the process. An engine cuDNN declines (a not-supported
//   or bad-parameter status) is passed over; any other failure is an error.
//   Engines that compile at runtime or sum in a varying order are timed
//   only when they are the heuristics' first. A call then only
//   packs its pointers into a variant pack and executes the plan: a few
//   microseconds of host time, where the legacy cudnnConvolution* calls
//   spent over thirty.
// - Math: no engine that down-converts its inputs or reduces in reduced
//   precision runs. float16 and bfloat16 data compute in float, on tensor
//   cores; float32 computes in float, on tensor cores (TF32) only when
//   allow_tf32(); float64 computes in double.
// - Workspace: a byte tensor (DType::Bool, one byte per element) from the
//   caching allocator on the current stream, freed when the call returns:
//   the stream orders its reuse after the convolution.
// - Bias: added after the forward and summed for its gradient by the
//   kernels of ember/kernels/cuda/conv_bias.h (every dtype, float sums).
// - Filters of few taps (ember/kernels/cuda/conv_small_filter.h) take their weight
//   and bias gradients from ember's own two kernels, not from cuDNN.
#include "ember/kernels/cuda/libraries/cudnn_conv.h"

#include "ember/kernels/cuda/conv_bias.h"
#include "ember/kernels/cuda/conv_small_filter.h"

#include <cudnn.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ember/core/cuda/cudnn_check.h"
#include "ember/core/cuda/device.h"
#include "ember/core/cuda/graph.h"
#include "ember/core/cuda/stream.h"
#include "ember/core/ops.h"
#include "ember/kernels/cuda/common/workspace.h"
#include "ember/kernels/cuda/libraries/cudnn_backend.h"
#include "ember/kernels/cuda/libraries/fastest_candidate.h"

namespace ember::cuda {
namespace {

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

std::string config_str(const ConvArgs& a) {
  std::ostringstream what;
  what << shapes_str(a) << (a.channels_last ? " channels-last" : "") << ", stride (" << a.stride_h << ", " << a.stride_w
       << "), padding (" << a.padding_h << ", " << a.padding_w << "), dilation (" << a.dilation_h << ", "
       << a.dilation_w << "), groups " << a.groups;
  return what.str();
}

// cuDNN's convolution engines index their tensors with 32 bits.
void check_fits_32_bits(const ConvArgs& a) {
  for (int64_t numel : {a.n * a.c_in * a.h * a.w, a.n * a.c_out * a.out_h * a.out_w,
                        a.c_out * (a.c_in / a.groups) * a.kernel_h * a.kernel_w}) {
    EMBER_CHECK(numel <= INT_MAX, "conv2d: a tensor of " << numel << " elements (" << shapes_str(a)
                                                         << ") is beyond the 32-bit indexing of cuDNN's convolutions; "
                                                            "split the batch into smaller convolutions");
  }
}

// The tensors of a convolution node, by unique id.
enum Uid : int64_t { kInput = 1, kWeight = 2, kOutput = 3 };

// The largest power of two up to 16 that divides the address: the byte
// alignment a plan may assume of a pointer of this class.
int64_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  int64_t alignment = 16;
  while (alignment > 1 && address % uintptr_t(alignment) != 0) alignment /= 2;
  return alignment;
}

// A dense tensor of `dims` (N, C, H, W order), NCHW or channels-last in memory.
Backend tensor_descriptor(Uid uid, DType dtype, std::array<int64_t, 4> dims, bool channels_last, int64_t alignment) {
  const std::array<int64_t, 4> strides =
      channels_last ? std::array<int64_t, 4>{dims[2] * dims[3] * dims[1], 1, dims[3] * dims[1], dims[1]}
                    : std::array<int64_t, 4>{dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1};
  const cudnnDataType_t type = data_type(dtype);
  const int64_t id = uid;
  Backend t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type)
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data())
      .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data())
      .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &id)
      .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
  t.finalize();
  return t;
}

Backend convolution_descriptor(const ConvArgs& a) {
  const cudnnDataType_t compute = a.dtype == DType::Float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t spatial = 2;
  const std::array<int64_t, 2> dilation{a.dilation_h, a.dilation_w}, stride{a.stride_h, a.stride_w},
      padding{a.padding_h, a.padding_w};
  Backend c(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  c.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute)
      .set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode)
      .set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial)
      .set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dilation.data())
      .set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride.data())
      .set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, padding.data())
      .set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, padding.data());
  c.finalize();
  return c;
}

// ---------------- plans ----------------

enum class Direction : int64_t { Forward, BackwardData, BackwardFilter };

const char* direction_name(Direction dir) {
  switch (dir) {
    case Direction::Forward: return "forward";
    case Direction::BackwardData: return "backward-data";
    case Direction::BackwardFilter: return "backward-filter";
  }
  return "";
}

// The attributes of each direction's operation: its descriptor type, then
// alpha, beta, the convolution, and the tensors (input, weight, output
// sides, as the direction names them).
struct OperationAttributes {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t alpha, beta, conv, input, weight, output;
};

OperationAttributes operation_attributes(Direction dir) {
  switch (dir) {
    case Direction::Forward:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y};
    case Direction::BackwardData:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY};
    case Direction::BackwardFilter:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY};
  }
  EMBER_FAIL("conv2d: unknown direction");
}

// The operation graph of one convolution node in direction `dir`, with the
// descriptors it refers to (cuDNN keeps references, not copies).
struct Graph {
  std::vector<Backend> parts;  // tensors, convolution, operation
  Backend graph{CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR};
};

std::unique_ptr<Graph> convolution_graph(const ConvArgs& a, Direction dir, cudnnHandle_t h,
                                         const std::array<int64_t, 3>& alignment) {
  auto g = std::make_unique<Graph>();
  const bool cl = a.channels_last;
  g->parts.push_back(tensor_descriptor(kInput, a.dtype, {a.n, a.c_in, a.h, a.w}, cl, alignment[0]));
  g->parts.push_back(
      tensor_descriptor(kWeight, a.dtype, {a.c_out, a.c_in / a.groups, a.kernel_h, a.kernel_w}, cl, alignment[1]));
  g->parts.push_back(tensor_descriptor(kOutput, a.dtype, {a.n, a.c_out, a.out_h, a.out_w}, cl, alignment[2]));
  g->parts.push_back(convolution_descriptor(a));
  const OperationAttributes at = operation_attributes(dir);
  Backend op(at.type);
  const double one_d = 1.0, zero_d = 0.0;
  const float one_f = 1.0f, zero_f = 0.0f;
  const bool dbl = a.dtype == DType::Float64;
  const cudnnBackendAttributeType_t scalar = dbl ? CUDNN_TYPE_DOUBLE : CUDNN_TYPE_FLOAT;
  op.set(at.alpha, scalar, 1, dbl ? static_cast<const void*>(&one_d) : &one_f)
      .set(at.beta, scalar, 1, dbl ? static_cast<const void*>(&zero_d) : &zero_f)
      .set(at.conv, g->parts[3])
      .set(at.input, g->parts[0])
      .set(at.weight, g->parts[1])
      .set(at.output, g->parts[2]);
  op.finalize();
  g->parts.push_back(std::move(op));
  const cudnnBackendDescriptor_t ops[] = {g->parts.back().get()};
  g->graph = operation_graph(ops, h);
  g->graph.finalize();
  return g;
}

// Whether numerics (an engine's notes) keep the contract of
// ember/core/ops/conv_kernels.h for `dtype` (tf32: allow_tf32() for this plan).
bool numerics_allowed(const std::vector<cudnnBackendNumericalNote_t>& numerics, DType dtype, bool tf32) {
  for (cudnnBackendNumericalNote_t note : numerics) {
    switch (note) {
      case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION:
      case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS: return false;
      case CUDNN_NUMERICAL_NOTE_TENSOR_CORE:
        if (dtype == DType::Float32 && !tf32) return false;
        break;
      default: break;
    }
  }
  return true;
}

// Whether the engine (with these numerical notes) is one the timing leaves
// to the heuristics: its finalize compiles kernels (seconds, not
// milliseconds), or its sums come in an order that varies from call to call.
bool untimed(const Backend& engine, const std::vector<cudnnBackendNumericalNote_t>& numerics) {
  std::array<cudnnBackendBehaviorNote_t, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT> behaviour{};
  int64_t count = 0;
  EMBER_CUDNN_CHECK(cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                             int64_t(behaviour.size()), &count, behaviour.data()));
  for (int64_t i = 0; i < count; ++i) {
    if (behaviour[size_t(i)] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) return true;
  }
  return std::find(numerics.begin(), numerics.end(), CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) != numerics.end();
}

// The three tensors of a call (input side, weight side, output side of the
// direction) and its workspace, packed for cudnnBackendExecute.
Backend conv_variant_pack(const std::array<void*, 3>& pointers, void* workspace_ptr) {
  const std::array<int64_t, 3> uids{kInput, kWeight, kOutput};
  return variant_pack(uids, pointers, workspace_ptr);
}

// An execution plan and the graph it was made from, kept alive beside it.
struct Plan {
  std::shared_ptr<Graph> graph;
  EnginePlan engine;
};

// Up to `limit` plans, in the heuristics' ranking (mode A, then its fallback
// list when mode A gave none): each of an engine configuration that keeps
// the dtype's numerics, finalizes on `h`, and whose workspace the allocator
// can provide. After the first, untimed() engines are passed over, so the
// timing never brings in a runtime compile or a varying sum order the
// heuristics' first did not have. Throws when there is none.
std::vector<std::unique_ptr<Plan>> candidate_plans(const ConvArgs& a, Direction dir, cudnnHandle_t h,
                                                   const std::array<int64_t, 3>& alignment, bool tf32, size_t limit) {
  check_fits_32_bits(a);
  std::shared_ptr<Graph> graph = convolution_graph(a, dir, h, alignment);
  RankedPlans ranked = ranked_plans(graph->graph, h, a.device, limit, 0, [&](const Backend& engine, size_t taken) {
    const std::vector<cudnnBackendNumericalNote_t> numerics = numerical_notes(engine);
    return numerics_allowed(numerics, a.dtype, tf32) && (taken == 0 || !untimed(engine, numerics));
  });
  std::vector<std::unique_ptr<Plan>> plans;
  for (EnginePlan& engine : ranked.plans) plans.push_back(std::make_unique<Plan>(Plan{graph, std::move(engine)}));
  if (!plans.empty()) return plans;
  EMBER_CHECK(ranked.any_finalized, "conv2d: cuDNN has no " << direction_name(dir) << " engine for " << config_str(a)
                                                            << " on this GPU; use float32 or float16");
  EMBER_FAIL("conv2d: the workspace of every cuDNN " << direction_name(dir) << " engine for " << config_str(a)
                                                     << " is larger than the free device memory; use a smaller batch");
}

// At most this many of the heuristics' plans are timed (conv_autotune()).
constexpr size_t kConvCandidates = 8;

// cuDNN's number for the engine a plan runs.
int64_t engine_number(const Plan& p) { return engine_index(engine_of(p.engine.config)); }

// With EMBER_CONV_AUTOTUNE_LOG=1, one line on stderr for each timed choice:
// the configuration, then each candidate's engine, event and host
// milliseconds for its timed runs, and the one kept.
void log_choice(const ConvArgs& a, Direction dir, const std::vector<std::unique_ptr<Plan>>& plans,
                const std::vector<CandidateTime>& timings, size_t best) {
  const char* on = std::getenv("EMBER_CONV_AUTOTUNE_LOG");  // read at each choice: choices are rare
  if (on == nullptr || std::string(on) != "1") return;
  std::ostringstream line;
  line << "ember conv autotune: " << direction_name(dir) << ", " << config_str(a) << ": kept engine "
       << engine_number(*plans[best]) << "; candidates (engine: event ms / host ms for " << kTimedRuns << " runs)";
  for (size_t i = 0; i < plans.size(); ++i) {
    line << (i == 0 ? " " : ", ") << engine_number(*plans[i]) << ": " << timings[i].ms << " / " << timings[i].host_ms;
  }
  std::fprintf(stderr, "%s\n", line.str().c_str());
}

// The plan for `a` in direction `dir` on h with the call's tensors at
// `pointers`: the heuristics' first, or with conv_autotune() on and the
// stream not capturing, the fastest of their first kConvCandidates run on
// these tensors (ember/kernels/cuda/libraries/fastest_candidate.h). Beta is 0, so the
// timed runs only write the call's output, which the call then writes again.
std::unique_ptr<Plan> make_plan(const ConvArgs& a, Direction dir, cudnnHandle_t h, const std::array<void*, 3>& pointers,
                                const std::array<int64_t, 3>& alignment, bool tf32) {
  const bool autotune = conv_autotune() && !is_capturing(a.device);
  std::vector<std::unique_ptr<Plan>> plans =
      candidate_plans(a, dir, h, alignment, tf32, autotune ? kConvCandidates : 1);
  if (plans.size() == 1) return std::move(plans[0]);
  size_t current = plans.size();
  Workspace ws;
  std::optional<Backend> pack;
  std::vector<CandidateTime> timings;
  const size_t best = fastest_candidate(
      a.device, plans.size(),
      [&](size_t i) {
        if (i != current) {  // the candidate's warm-up: its workspace and pack
          current = i;
          pack.reset();
          ws = Workspace();  // the last candidate's, freed first
          try {
            ws = Workspace(size_t(plans[i]->engine.workspace), a.device);
          } catch (const OutOfMemoryError&) {
            return false;
          }
          pack.emplace(conv_variant_pack(pointers, ws.data()));
        }
        if (!pack) return false;
        return cudnnBackendExecute(h, plans[i]->engine.plan.get(), pack->get()) == CUDNN_STATUS_SUCCESS;
      },
      &timings);
  log_choice(a, dir, plans, timings, best);
  return std::move(plans[best]);
}

using PlanKey = std::tuple<std::array<int64_t, 17>, std::array<int64_t, 3>, Direction, cudnnHandle_t, bool>;

class PlanCache {
 public:
  // The plan of `a` in direction `dir` on handle h for pointers aligned as
  // the call's `pointers`, made at its first call (on its tensors). Plans
  // live as long as the process. A plan is made outside the lock (heuristics,
  // finalizing and timing take long); only h's thread makes plans for h, so
  // no two threads make the same one.
  const Plan& get(const ConvArgs& a, Direction dir, cudnnHandle_t h, const std::array<void*, 3>& pointers) {
    const bool tf32 = allow_tf32();
    const std::array<int64_t, 3> alignment{alignment_of(pointers[0]), alignment_of(pointers[1]),
                                           alignment_of(pointers[2])};
    const PlanKey key{
        {a.n, a.c_in, a.h, a.w, a.c_out, a.kernel_h, a.kernel_w, a.stride_h, a.stride_w, a.padding_h, a.padding_w,
         a.dilation_h, a.dilation_w, a.groups, int64_t(a.dtype), a.device, int64_t(a.channels_last)},
        alignment,
        dir,
        h,
        tf32};
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = map_.find(key);
      if (it != map_.end()) return *it->second;
    }
    std::unique_ptr<Plan> plan = make_plan(a, dir, h, pointers, alignment, tf32);
    std::lock_guard<std::mutex> lock(mutex_);
    return *map_.emplace(key, std::move(plan)).first->second;
  }

 private:
  std::mutex mutex_;
  std::map<PlanKey, std::unique_ptr<Plan>> map_;
};

PlanCache& plan_cache() {
  static PlanCache* cache = new PlanCache;
  return *cache;
}

// Runs `dir`'s plan for `a` with the three tensors at these addresses (input
// side, weight side, output side of the direction).
void execute(const ConvArgs& a, Direction dir, const void* input, const void* weight, const void* output) {
  DeviceGuard guard(a.device);
  cudnnHandle_t h =
      handle_for(a.device, current_stream(a.device).handle(), "the first convolution of a thread on a device");
  const std::array<void*, 3> pointers{const_cast<void*>(input), const_cast<void*>(weight), const_cast<void*>(output)};
  const Plan& plan = plan_cache().get(a, dir, h, pointers);
  const Workspace ws(size_t(plan.engine.workspace), a.device);
  const Backend pack = conv_variant_pack(pointers, ws.data());
  EMBER_CUDNN_CHECK(cudnnBackendExecute(h, plan.engine.plan.get(), pack.get()));
}

}  // namespace

void cudnn_conv_forward(const ConvArgs& a) {
  execute(a, Direction::Forward, a.input, a.weight, a.output);
  if (a.bias) conv_bias_add(a);
}

void cudnn_conv_backward_data(const ConvArgs& a) {
  execute(a, Direction::BackwardData, a.grad_input, a.weight, a.grad_output);
}

void cudnn_conv_backward_filter(const ConvArgs& a) {
  if (small_filter_weight_grad_applies(a)) {
    small_filter_weight_grad(a);  // the bias's gradient too
    return;
  }
  if (a.grad_weight) execute(a, Direction::BackwardFilter, a.input, a.grad_weight, a.grad_output);
  if (a.grad_bias) conv_bias_grad(a);
}

EMBER_REGISTER_KERNEL(conv2d_forward_stub, DeviceType::CUDA, cudnn_conv_forward);
EMBER_REGISTER_KERNEL(conv2d_backward_input_stub, DeviceType::CUDA, cudnn_conv_backward_data);
EMBER_REGISTER_KERNEL(conv2d_backward_weight_stub, DeviceType::CUDA, cudnn_conv_backward_filter);

}  // namespace ember::cuda
