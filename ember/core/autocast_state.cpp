// Autocast's thread-local state, its cast caches and the cast policy (see
// ember/core/autocast_state.h).
#include "ember/core/autocast_state.h"

#include <atomic>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "ember/core/autograd/function.h"
#include "ember/core/cuda/graph.h"
#include "ember/core/grad_mode.h"
#include "ember/core/ops/amp_kernels.h"

namespace ember::autocast_state {

namespace detail {
constinit thread_local uint8_t enabled_mask = 0;
}  // namespace detail

namespace {

// A cast and what it was made from. The leaf's TensorImpl can be pointed at
// other data of the same version (Module::to, replicate): the storage, its
// offset and the shape are compared too, and a cast is reused only while
// they all match and the leaf is still float32.
struct CacheEntry {
  std::weak_ptr<TensorImpl> leaf;  // the key's pointer is only valid while this lives
  std::weak_ptr<Storage> storage;  // the leaf's data when the cast was made
  int64_t offset = 0;
  Shape sizes, strides;
  uint32_t version = 0;
  uint64_t epoch = 0;  // kept casts: kept_epoch when made
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

// Records t as the source of e's cast, as of now.
void remember_source(CacheEntry& e, const Tensor& t) {
  e.leaf = t.impl_ptr();
  e.storage = t.storage();
  e.offset = t.storage_offset();
  e.sizes = t.sizes();
  e.strides = t.strides();
  e.version = t.version();
  e.epoch = kept_epoch.load();
}

// e's cast was made from t's present data (maybe since modified in place).
bool same_source(const CacheEntry& e, const Tensor& t) {
  return e.leaf.lock() == t.impl_ptr() && t.dtype() == DType::Float32 && e.storage.lock() == t.storage() &&
         e.offset == t.storage_offset() && e.sizes == t.sizes() && e.strides == t.strides();
}

// e's cast equals the cast of t's values now.
bool fresh(const CacheEntry& e, const Tensor& t) {
  return same_source(e, t) && e.version == t.version() && e.epoch == kept_epoch.load();
}

bool cacheable(const Tensor& t, const ThreadState& ts) {
  return ts.state.cache_enabled && ts.nesting > 0 && GradMode::is_enabled() && t.dtype() == DType::Float32 &&
         t.is_leaf() && t.requires_grad() && !t.impl()->is_view;
}

// Recasts, in one cast_many launch, every kept cast to `dtype` on `device`
// whose leaf was modified since it was made (into fresh tensors: a graph
// that saved the old cast keeps it), and forgets the casts of leaves that
// died or were pointed at other data (made anew at their next use).
void refresh_kept(ThreadState& ts, Device device, DType dtype) {
  NoGradGuard no_grad;
  std::vector<optim::FusedTensor> batch;
  for (auto it = ts.kept.begin(); it != ts.kept.end();) {
    const std::shared_ptr<TensorImpl> leaf = it->second.leaf.lock();
    if (leaf == nullptr) {
      it = ts.kept.erase(it);
      continue;
    }
    CacheEntry& e = it->second;
    const Tensor t(leaf);
    if (it->first.second != dtype || t.device() != device || fresh(e, t)) {
      ++it;
      continue;
    }
    if (!same_source(e, t)) {
      it = ts.kept.erase(it);
      continue;
    }
    remember_source(e, t);
    if (t.is_non_overlapping_and_dense()) {  // walked flat, in the leaf's own layout
      e.cast = empty_strided(t.shape(), t.strides(), dtype, device);
      optim::FusedTensor f;
      f.param = e.cast.data_ptr();
      f.grad = t.data_ptr();  // float32, numel elements: same_source
      f.numel = t.numel();
      batch.push_back(f);
    } else {
      e.cast = t.to(dtype);
    }
    ++it;
  }
  const optim::MultiTensorArgs args{device.is_cuda() ? device.index : 0, dtype, batch.data(), int64_t(batch.size())};
  amp::cast_many_stub(device.type)(args);
}

// Forgets the kept casts of leaves that died.
void prune_dead(ThreadState& ts) {
  std::erase_if(ts.kept, [](const auto& kv) { return kv.second.leaf.expired(); });
}

Tensor kept_cast(const Tensor& t, DType dtype, ThreadState& ts) {
  NoGradGuard no_grad;
  // A capture must record the cast itself: its replays run after weight
  // updates that no kept cast sees.
  if (t.is_cuda() && cuda::is_capturing(t.device().index)) return t.to(dtype);
  const CacheKey key{t.impl(), dtype};
  if (auto it = ts.kept.find(key); it != ts.kept.end() && same_source(it->second, t)) {
    if (!fresh(it->second, t)) refresh_kept(ts, t.device(), dtype);  // keeps this entry: same source
    return it->second.cast;
  }
  prune_dead(ts);
  CacheEntry& e = ts.kept[key];
  remember_source(e, t);
  e.cast = t.to(dtype);
  return e.cast;
}

// The region's cast of t with history: the kept cast's data (no kernel when
// it is fresh) under a node of its own whose backward casts the gradient
// back, as Tensor::to's does.
Tensor cached_cast(const Tensor& t, DType dtype, ThreadState& ts) {
  CacheEntry& e = ts.cache[{t.impl(), dtype}];
  if (e.cast.defined() && fresh(e, t)) return e.cast;
  remember_source(e, t);
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

// The first of `leaf`'s kept casts on this thread (one per half dtype) that
// match(entry) accepts, or null.
template <typename Match>
CacheEntry* find_kept(ThreadState& ts, const Tensor& leaf, Match match) {
  for (auto it = ts.kept.lower_bound({leaf.impl(), DType{}}); it != ts.kept.end() && it->first.first == leaf.impl();
       ++it) {
    if (match(it->second)) return &it->second;
  }
  return nullptr;
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

Tensor fresh_kept_cast(const Tensor& leaf) {
  ThreadState& ts = local();
  if (ts.kept.empty() || leaf.dtype() != DType::Float32) return Tensor();
  if (leaf.is_cuda() && cuda::is_capturing(leaf.device().index)) return Tensor();
  const CacheEntry* e = find_kept(ts, leaf, [&](const CacheEntry& c) { return fresh(c, leaf); });
  return e != nullptr ? e->cast : Tensor();
}

void kept_cast_rewritten(const Tensor& leaf, const Tensor& cast) {
  CacheEntry* e =
      find_kept(local(), leaf, [&](const CacheEntry& c) { return c.cast.is_same(cast) && same_source(c, leaf); });
  if (e == nullptr) return;
  e->version = leaf.version();
  e->cast.storage()->bump_version();
}

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
