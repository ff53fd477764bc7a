// Autocast's thread-local state, its cast caches and the cast policy (see
// core/autocast_state.h).
#include "core/autocast_state.h"

#include <atomic>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "core/autograd/function.h"
#include "core/cuda/graph.h"
#include "core/grad_mode.h"
#include "core/ops/amp_kernels.h"

namespace ember::autocast_state {

namespace detail {
constinit thread_local uint8_t enabled_mask = 0;
}  // namespace detail

namespace {

struct CacheEntry {
  std::weak_ptr<TensorImpl> leaf;  // the key's pointer is only valid while this lives
  uint32_t version = 0;
  uint64_t epoch = 0;              // kept casts: kept_epoch when made
  Tensor cast;
};

// Advanced by every CUDA graph replay, which changes weights without
// moving their versions: a kept cast made before it is stale.
std::atomic<uint64_t> kept_epoch{0};

using CacheKey = std::pair<const TensorImpl*, DType>;

struct ThreadState {
  State state;
  int nesting = 0;
  std::map<CacheKey, CacheEntry> cache;  // casts with history, for the outermost region
  std::map<CacheKey, CacheEntry> kept;   // casts without history, from region to region
};

ThreadState& local() {
  thread_local ThreadState s;
  return s;
}

uint8_t mask_of(const State& s) {
  uint8_t m = 0;
  for (int i = 0; i < kNumDeviceTypes; ++i) {
    if (s.enabled[size_t(i)]) m = uint8_t(m | (1u << i));
  }
  return m;
}

bool cacheable(const Tensor& t, const ThreadState& ts) {
  return ts.state.cache_enabled && ts.nesting > 0 && GradMode::is_enabled() && t.dtype() == DType::Float32 &&
         t.is_leaf() && t.requires_grad() && !t.impl()->is_view;
}

// Recasts, in one cast_many launch, every kept cast to `dtype` on `device`
// whose leaf changed since it was made (into fresh tensors: a graph that
// saved the old cast keeps it), and forgets the casts of leaves that died.
void refresh_kept(ThreadState& ts, Device device, DType dtype) {
  NoGradGuard no_grad;
  const uint64_t epoch = kept_epoch.load();
  std::vector<optim::FusedTensor> batch;
  for (auto it = ts.kept.begin(); it != ts.kept.end();) {
    const std::shared_ptr<TensorImpl> leaf = it->second.leaf.lock();
    if (leaf == nullptr) {
      it = ts.kept.erase(it);
      continue;
    }
    CacheEntry& e = it->second;
    const Tensor t(leaf);
    if (it->first.second == dtype && t.device() == device && (e.version != t.version() || e.epoch != epoch)) {
      e.version = t.version();
      e.epoch = epoch;
      if (t.is_contiguous()) {
        e.cast = empty(t.shape(), dtype, device);
        optim::FusedTensor f;
        f.param = e.cast.data_ptr();
        f.grad = t.data_ptr();
        f.numel = t.numel();
        batch.push_back(f);
      } else {
        e.cast = t.to(dtype);
      }
    }
    ++it;
  }
  const optim::MultiTensorArgs args{device.is_cuda() ? device.index : 0, dtype, batch.data(), int64_t(batch.size())};
  amp::cast_many_stub(device.type)(args);
}

Tensor kept_cast(const Tensor& t, DType dtype, ThreadState& ts) {
  NoGradGuard no_grad;
  // A capture must record the cast itself: its replays run after weight
  // updates that no kept cast sees.
  if (t.is_cuda() && cuda::is_capturing(t.device().index)) return t.to(dtype);
  const CacheKey key{t.impl(), dtype};
  if (auto it = ts.kept.find(key); it != ts.kept.end() && it->second.leaf.lock() == t.impl_ptr()) {
    if (it->second.version != t.version() || it->second.epoch != kept_epoch.load()) {
      refresh_kept(ts, t.device(), dtype);
    }
    return it->second.cast;
  }
  CacheEntry& e = ts.kept[key];
  e.leaf = t.impl_ptr();
  e.version = t.version();
  e.epoch = kept_epoch.load();
  e.cast = t.to(dtype);
  return e.cast;
}

// The region's cast of t with history: the kept cast's data (no kernel when
// it is fresh) under a node of its own whose backward casts the gradient
// back, as Tensor::to's does.
Tensor cached_cast(const Tensor& t, DType dtype, ThreadState& ts) {
  CacheEntry& e = ts.cache[{t.impl(), dtype}];
  if (e.cast.defined() && e.leaf.lock() == t.impl_ptr() && e.version == t.version()) return e.cast;
  e.leaf = t.impl_ptr();
  e.version = t.version();
  e.cast = kept_cast(t, dtype, ts).detach();
  const DType in_dt = t.dtype();
  const Device in_dev = t.device();
  autograd::record("ToCopyBackward", {&e.cast}, {t},
                   [in_dt, in_dev](const TensorList& g) { return TensorList{g[0].to(in_dev, in_dt)}; });
  return e.cast;
}

// The cast of t under policy, with or without its autograd record.
Tensor cast_to_policy(const Tensor& t, CastPolicy policy, bool with_history) {
  if (!t.defined() || !is_floating(t.dtype()) || t.dtype() == DType::Float64) return t;
  const DeviceType type = t.device().type;
  if ((detail::enabled_mask & (1u << int(type))) == 0) return t;
  ThreadState& ts = local();
  const DType target = policy == CastPolicy::LowerPrecision ? ts.state.dtype[size_t(type)] : DType::Float32;
  if (t.dtype() == target) return t;
  if (policy == CastPolicy::LowerPrecision && cacheable(t, ts)) {
    return with_history ? cached_cast(t, target, ts) : kept_cast(t, target, ts);
  }
  if (with_history) return t.to(target);
  NoGradGuard no_grad;
  return t.to(target);
}

}  // namespace

State get_state() { return local().state; }

void set_state(const State& state) {
  local().state = state;
  detail::enabled_mask = mask_of(state);
}

bool is_enabled(DeviceType type) { return local().state.enabled[size_t(type)]; }
DType lower_precision_dtype(DeviceType type) { return local().state.dtype[size_t(type)]; }

void enter_region() { ++local().nesting; }

void exit_region() {
  ThreadState& ts = local();
  if (--ts.nesting <= 0) {
    ts.nesting = 0;
    ts.cache.clear();
  }
}

size_t cached_casts() { return local().cache.size(); }
size_t kept_casts() { return local().kept.size(); }

void invalidate_kept_casts() { kept_epoch.fetch_add(1); }

void clear_cache() {
  ThreadState& ts = local();
  ts.cache.clear();
  ts.kept.clear();
}

Tensor cast(const Tensor& t, CastPolicy policy) { return cast_to_policy(t, policy, /*with_history=*/true); }

Tensor cast_without_history(const Tensor& t, CastPolicy policy) {
  return cast_to_policy(t, policy, /*with_history=*/false);
}

bool cast_inputs(CastPolicy policy, std::initializer_list<Tensor*> inputs) {
  bool changed = false;
  for (Tensor* t : inputs) {
    Tensor c = cast(*t, policy);
    if (!c.is_same(*t)) {
      *t = std::move(c);
      changed = true;
    }
  }
  return changed;
}

SuspendGuard::SuspendGuard() : saved_(get_state()) {
  State off = saved_;
  off.enabled.fill(false);
  set_state(off);
}

SuspendGuard::~SuspendGuard() { set_state(saved_); }

}  // namespace ember::autocast_state
