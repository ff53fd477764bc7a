// GradScaler (see ember/parallel/amp/grad_scaler.h).
//
// The inf/NaN check and the unscale of each (device, dtype) group of
// gradients are one fused multi-tensor kernel that sets the device's
// found-inf flag (ember/core/ops/amp_kernels.h); the scale update is one
// single-thread kernel on the scale's device. All of it is queued on the
// device: no host round trip until a getter is called or the periodic
// collapse check reads the scale.
#include "ember/parallel/amp/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "ember/core/autograd/function.h"
#include "ember/core/cuda/graph.h"
#include "ember/core/grad_mode.h"
#include "ember/core/memory_format.h"
#include "ember/core/ops.h"
#include "ember/core/ops/amp_kernels.h"
#include "ember/core/ops/op_utils.h"
#include "ember/core/ops/optimizer_kernels.h"

namespace ember::amp {

using ember::detail::describe;

namespace {

// Sets found_inf (a () float32 flag on `device`) when the dense gradients
// of one device and dtype hold an inf or NaN; with inv_scale (a () float32
// on `device`) defined, also multiplies them by it. One fused multi-tensor
// kernel (ember/core/ops/amp_kernels.h).
void unscale_and_check(const TensorList& grads, Device device, DType dtype, const Tensor& inv_scale,
                       const Tensor& found_inf) {
  std::vector<optim::FusedTensor> fused;
  for (const Tensor& g : grads) {
    optim::FusedTensor f;
    f.param = g.data_ptr();
    f.numel = g.numel();
    fused.push_back(f);
  }
  optim::MultiTensorArgs args{device.is_cuda() ? device.index : 0, dtype, fused.data(), int64_t(fused.size())};
  unscale_and_check_stub(device.type)(args,
                                      inv_scale.defined() ? static_cast<const float*>(inv_scale.data_ptr()) : nullptr,
                                      static_cast<float*>(found_inf.data_ptr()));
}

// The node of scale(loss): the loss's gradient is the incoming one times
// the scale, and for backward()'s seed 1 the scale itself, so
// scaler.scale(loss).backward() makes no seed and multiplies nothing.
class ScaledLossBackward final : public Node {
 public:
  ScaledLossBackward(Edge loss, Tensor scale, const Tensor& like)
      : scale_(std::move(scale)), version_(scale_.version()), shape_(like.shape()), dtype_(like.dtype()) {
    next_edges_.push_back(std::move(loss));
  }
  std::string name() const override { return "GradScalerScaleBackward"; }
  TensorList apply(TensorList&& grads) override {
    if (!grads[0].defined()) return {Tensor()};
    check_unchanged();
    return {(grads[0] * scale_).to(dtype_)};
  }
  std::optional<TensorList> apply_to_unit_seed() override {
    check_unchanged();
    return TensorList{dtype_ == scale_.dtype() ? scale_.reshape(shape_) : scale_.to(dtype_).reshape(shape_)};
  }

 private:
  void check_unchanged() const {
    EMBER_CHECK(scale_.version() == version_,
                "GradScaler.scale: the scale changed (update(), load_state_dict()) between scale(loss) and the "
                "backward of the scaled loss, so the gradients would not match the loss; call backward() before "
                "update()");
  }

  Tensor scale_;  // the scaler's, () float32 on the loss's device
  uint32_t version_;
  Shape shape_;  // the loss's
  DType dtype_;
};

}  // namespace

GradScaler::GradScaler(GradScalerOptions options) : options_(options), pending_scale_(options.init_scale) {
  const GradScalerOptions& o = options_;
  EMBER_CHECK(o.init_scale > 0 && std::isfinite(o.init_scale),
              "GradScaler: init_scale must be positive and finite, but is " << o.init_scale);
  EMBER_CHECK(o.growth_factor > 1.0, "GradScaler: growth_factor must be greater than 1, but is " << o.growth_factor);
  EMBER_CHECK(o.backoff_factor > 0.0 && o.backoff_factor < 1.0,
              "GradScaler: backoff_factor must be in (0, 1), but is " << o.backoff_factor);
  EMBER_CHECK(o.growth_interval >= 1, "GradScaler: growth_interval must be at least 1, but is " << o.growth_interval);
  EMBER_CHECK(o.min_scale > 0 && o.min_scale <= o.init_scale && o.init_scale <= o.max_scale,
              "GradScaler: need 0 < min_scale <= init_scale <= max_scale, but got min_scale "
                  << o.min_scale << ", init_scale " << o.init_scale << ", max_scale " << o.max_scale);
  EMBER_CHECK(o.check_interval >= 1, "GradScaler: check_interval must be at least 1, but is " << o.check_interval);
}

Tensor GradScaler::scale(const Tensor& loss) {
  if (!options_.enabled) return loss;
  EMBER_CHECK(loss.defined() && is_floating(loss.dtype()),
              "GradScaler.scale: expected a floating tensor (the loss), got "
                  << (loss.defined() ? describe(loss) : std::string("an undefined tensor")));
  if (!scale_.defined()) {
    const Device d = loss.device();
    scale_ = empty({}, DType::Float32, d);
    inv_scale_ = empty({}, DType::Float32, d);
    fill_scale(pending_scale_);
    growth_tracker_ = full({}, pending_tracker_, DType::Int32, d);
    skipped_ = zeros({}, DType::Int64, d);
  }
  const Tensor scale = scale_.to(loss.device());
  Tensor scaled;
  {
    NoGradGuard no_grad;
    scaled = loss * scale;
  }
  if (autograd::needs_grad(loss)) {
    autograd::set_history(scaled, std::make_shared<ScaledLossBackward>(autograd::gradient_edge(loss), scale, loss), 0);
  }
  return scaled;
}

void GradScaler::check_scale(const char* method) const {
  EMBER_CHECK(scale_.defined(), "GradScaler." << method
                                              << ": the scale is not set yet; call scaler.scale(loss) "
                                                 "(and backward on it) earlier in the iteration");
}

void GradScaler::check_and_unscale(optim::Optimizer& optimizer, PerOptimizer& st, bool unscale) {
  NoGradGuard no_grad;
  // Gradients by (device, dtype), in parameter order.
  std::vector<std::pair<std::pair<Device, DType>, TensorList>> groups;
  for (const optim::ParamGroup& group : optimizer.param_groups()) {
    for (const Tensor& p : group.params) {
      const Tensor g = p.grad();
      if (!g.defined()) continue;
      EMBER_CHECK(!unscale || g.dtype() != DType::Float16,
                  "GradScaler.unscale_: attempting to unscale float16 gradients (of a parameter "
                      << describe(p)
                      << "), which loses their small values; keep float32 master weights "
                         "(amp::MasterWeights) and give the optimizer of those to the scaler, or "
                         "call step() without unscale_ (the fused step unscales in float32)");
      auto key = std::make_pair(g.device(), g.dtype());
      auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& e) { return e.first == key; });
      if (it == groups.end()) groups.push_back({key, {g}});
      else it->second.push_back(g);
    }
  }
  st.found_inf.clear();
  for (const auto& [key, grads] : groups) {
    const Device device = key.first;
    const DType dtype = key.second;
    auto it = std::find_if(st.found_inf.begin(), st.found_inf.end(), [&](const auto& e) { return e.first == device; });
    if (it == st.found_inf.end()) {
      // The flag the last update reset, when it is this optimizer's and on
      // this device; else a zeroed one. A capture zeroes its own, from the
      // graph's pool: a flag made before it could be freed while the graph
      // still writes it.
      Tensor flag;
      const bool capturing = device.is_cuda() && cuda::is_capturing(device.index);
      if (!capturing && reset_flag_.defined() && reset_flag_owner_ == &optimizer && reset_flag_.device() == device) {
        flag = std::move(reset_flag_);
        reset_flag_ = Tensor();
      } else {
        flag = zeros({}, DType::Float32, device);
      }
      it = st.found_inf.insert(it, {device, flag});
    }
    TensorList dense;
    for (const Tensor& g : grads) dense.push_back(dense_block(g));
    Tensor inv_scale = unscale ? inv_scale_.to(device) : Tensor();
    unscale_and_check(dense, device, dtype, inv_scale, it->second);
    if (unscale) {
      for (size_t i = 0; i < grads.size(); ++i) {
        if (dense[i].is_same(grads[i])) grads[i].storage()->bump_version();
        else Tensor(grads[i]).copy_(dense[i]);
      }
    }
  }
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!options_.enabled) return;
  check_scale("unscale_");
  PerOptimizer& st = per_optimizer_[&optimizer];
  EMBER_CHECK(st.stage != Stage::Unscaled,
              "GradScaler.unscale_: unscale_() has already been called on this optimizer since the last update()");
  EMBER_CHECK(st.stage != Stage::Stepped,
              "GradScaler.unscale_: unscale_() is being called after step(); call it "
              "between backward and step, once per optimizer per iteration");
  check_and_unscale(optimizer, st, /*unscale=*/true);
  st.stage = Stage::Unscaled;
}

void GradScaler::step(optim::Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return;
  }
  check_scale("step");
  PerOptimizer& st = per_optimizer_[&optimizer];
  EMBER_CHECK(st.stage != Stage::Stepped,
              "GradScaler.step: step() has already been called on this optimizer since "
              "the last update()");
  bool unscaled = st.stage == Stage::Unscaled;
  if (!unscaled) {
    // Over several devices the host decides (below), on unscaled gradients.
    std::vector<Device> devices;
    for (const optim::ParamGroup& group : optimizer.param_groups()) {
      for (const Tensor& p : group.params) {
        const Tensor g = p.grad();
        if (g.defined() && std::find(devices.begin(), devices.end(), g.device()) == devices.end()) {
          devices.push_back(g.device());
        }
      }
    }
    unscaled = devices.size() > 1;
    check_and_unscale(optimizer, st, unscaled);
  }
  EMBER_CHECK(!st.found_inf.empty(),
              "GradScaler.step: no inf checks were recorded for this optimizer: none of its "
              "parameters has a gradient (run backward on scaler.scale(loss) first)");
  if (st.found_inf.size() == 1) {
    const auto& [device, found] = st.found_inf.front();
    optim::GradScaling scaling;
    scaling.found_inf = found;
    if (!unscaled) {
      NoGradGuard no_grad;
      scaling.inv_scale = inv_scale_.to(device);
    }
    optimizer.step(scaling);
  } else {
    double total = 0;
    for (const auto& [device, found] : st.found_inf) total += found.item<double>();
    if (total == 0) optimizer.step();
  }
  st.stage = Stage::Stepped;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  check_scale("update");
  NoGradGuard no_grad;
  const Device d = scale_.device();
  Tensor found;
  for (const auto& [opt, st] : per_optimizer_) {
    for (const auto& [device, f] : st.found_inf) found = found.defined() ? found + f.to(d) : f.to(d);
  }
  EMBER_CHECK(found.defined(),
              "GradScaler.update: no inf checks were recorded prior to update(); call "
              "scaler.step(optimizer) (or unscale_) for this iteration first");
  found = found.contiguous();
  const GradScalerOptions& o = options_;
  ScaleState state;
  state.device = d.is_cuda() ? d.index : 0;
  state.scale = static_cast<float*>(scale_.data_ptr());
  state.inv_scale = static_cast<float*>(inv_scale_.data_ptr());
  state.growth_tracker = static_cast<int32_t*>(growth_tracker_.data_ptr());
  state.skipped = static_cast<int64_t*>(skipped_.data_ptr());
  state.found_inf = static_cast<float*>(found.data_ptr());
  update_scale_stub(d.type)(state, {o.growth_factor, o.backoff_factor, o.growth_interval, o.min_scale, o.max_scale});
  for (const Tensor* t : {&scale_, &inv_scale_, &growth_tracker_, &skipped_, &found}) t->storage()->bump_version();
  // One optimizer's one flag was read (and reset) by the kernel itself: keep
  // it for that optimizer's next check (not a captured one: the graph's
  // replays reset it, not this call).
  reset_flag_ = Tensor();
  reset_flag_owner_ = nullptr;
  const bool capturing = d.is_cuda() && cuda::is_capturing(d.index);
  if (!capturing && per_optimizer_.size() == 1 && per_optimizer_.begin()->second.found_inf.size() == 1 &&
      per_optimizer_.begin()->second.found_inf.front().second.is_same(found)) {
    reset_flag_owner_ = per_optimizer_.begin()->first;
    reset_flag_ = found;
  }
  per_optimizer_.clear();
  // Replays of a CUDA graph run no host code: there the collapse is caught
  // by skipped_steps() and get_scale(), which check it too.
  if (capturing) return;
  if (++updates_ % o.check_interval == 0) check_collapse(scale_.item<double>());
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled) return;
  check_scale("update");
  EMBER_CHECK(new_scale > 0 && std::isfinite(new_scale),
              "GradScaler.update: the new scale must be positive and finite, but is " << new_scale);
  fill_scale(new_scale);
  // This iteration's flags were not read: none is known to be reset.
  reset_flag_ = Tensor();
  reset_flag_owner_ = nullptr;
  per_optimizer_.clear();
}

void GradScaler::fill_scale(double scale) {
  NoGradGuard no_grad;
  scale_.fill_(scale);
  inv_scale_.fill_(double(1.0f / float(scale)));  // as the update kernel computes it, in float32
}

void GradScaler::check_collapse(double scale) {
  if (scale > double(float(options_.min_scale))) return;
  const int64_t skipped = skipped_.item<int64_t>();
  EMBER_FAIL("GradScaler: the loss scale collapsed to its minimum "
             << scale << " (min_scale) after " << skipped
             << " skipped steps in all: the gradients were inf or NaN at every step, even with the loss scaled "
                "down far below 1. The loss is NaN/inf or the model diverged: check that the loss is finite "
                "(run a step without autocast), lower the learning rate, or clip the gradients "
                "(scaler.unscale_(optimizer), then optim::clip_grad_norm_)");
}

double GradScaler::get_scale() {
  if (!options_.enabled) return 1.0;
  if (!scale_.defined()) return pending_scale_;
  const double s = scale_.item<double>();
  check_collapse(s);
  return s;
}

int64_t GradScaler::skipped_steps() {
  if (!options_.enabled || !scale_.defined()) return 0;
  check_collapse(scale_.item<double>());
  return skipped_.item<int64_t>();
}

int64_t GradScaler::growth_tracker() {
  if (!options_.enabled) return 0;
  return scale_.defined() ? growth_tracker_.item<int64_t>() : pending_tracker_;
}

GradScalerState GradScaler::state_dict() {
  GradScalerState s;
  s.scale = scale_.defined() ? scale_.item<double>() : pending_scale_;
  s.growth_factor = options_.growth_factor;
  s.backoff_factor = options_.backoff_factor;
  s.growth_interval = options_.growth_interval;
  s.growth_tracker = growth_tracker();
  return s;
}

void GradScaler::load_state_dict(const GradScalerState& s) {
  EMBER_CHECK(s.scale > 0 && std::isfinite(s.scale),
              "GradScaler.load_state_dict: scale must be positive and finite, "
              "but is "
                  << s.scale);
  EMBER_CHECK(s.growth_factor > 1.0 && s.backoff_factor > 0.0 && s.backoff_factor < 1.0 && s.growth_interval >= 1 &&
                  s.growth_tracker >= 0 && s.growth_tracker < s.growth_interval,
              "GradScaler.load_state_dict: bad state: growth_factor "
                  << s.growth_factor << " (must be > 1), backoff_factor " << s.backoff_factor
                  << " (in (0, 1)), growth_interval " << s.growth_interval << " (>= 1), growth tracker "
                  << s.growth_tracker << " (in [0, growth_interval))");
  options_.growth_factor = s.growth_factor;
  options_.backoff_factor = s.backoff_factor;
  options_.growth_interval = s.growth_interval;
  pending_scale_ = s.scale;
  pending_tracker_ = s.growth_tracker;
  if (scale_.defined()) {
    fill_scale(s.scale);
    NoGradGuard no_grad;
    growth_tracker_.fill_(s.growth_tracker);
  }
}

}  // namespace ember::amp
