// Autocast's thread-local state, its cast cache and the cast policy (see
// core/autocast_state.h).
#include "core/autocast_state.h"

#include <map>
#include <memory>
#include <tuple>

#include "core/grad_mode.h"

namespace ember::autocast_state {

namespace detail {
constinit thread_local uint8_t enabled_mask = 0;
}  // namespace detail

namespace {

struct CacheEntry {
  std::weak_ptr<TensorImpl> leaf;  // the key's pointer is only valid while this lives
  uint32_t version = 0;
  Tensor cast;
};

// Keyed by the leaf, the cast's dtype and whether the cast has an autograd
// record (cast) or none (cast_without_history).
using CacheKey = std::tuple<const TensorImpl*, DType, bool>;

struct ThreadState {
  State state;
  int nesting = 0;
  std::map<CacheKey, CacheEntry> cache;
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

Tensor cached_cast(const Tensor& t, DType dtype, bool with_history, ThreadState& ts) {
  CacheEntry& e = ts.cache[{t.impl(), dtype, with_history}];
  if (e.cast.defined() && e.leaf.lock() == t.impl_ptr() && e.version == t.version()) return e.cast;
  e.leaf = t.impl_ptr();
  e.version = t.version();
  if (with_history) {
    e.cast = t.to(dtype);
  } else {
    NoGradGuard no_grad;
    e.cast = t.to(dtype);
  }
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
  if (policy == CastPolicy::LowerPrecision && cacheable(t, ts)) return cached_cast(t, target, with_history, ts);
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
