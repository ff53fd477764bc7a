// GradScaler (see parallel/amp/grad_scaler.h).
//
// The inf/NaN check and the unscale run per (device, dtype) group of
// gradients through the multi-tensor kernels of clip_grad_norm_
// (core/ops/optimizer_kernels.h): norm_partials with an infinite norm gives
// max |g| per chunk with NaN propagated, one amax and a comparison turn that
// into the found-inf flag, and scale multiplies every gradient by 1 / scale
// read on the device. Two multi-tensor launches and a few one-element ops
// per group; the scale update is a handful of one-element ops. All of it is
// queued on the device: no host round trip until a getter is called or the
// periodic collapse check reads the scale.
#include "parallel/amp/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/grad_mode.h"
#include "core/ops.h"
#include "core/ops/op_utils.h"
#include "core/ops/optimizer_kernels.h"

namespace ember::amp {

using ember::detail::describe;

namespace {

// True (as a () float32 tensor: 1 or 0) when the gradients of one device and
// dtype hold an inf or NaN; with inv_scale defined they are also multiplied
// by it. grads are dense.
Tensor found_inf_and_unscale(const TensorList& grads, Device device, DType dtype, const Tensor& inv_scale) {
  std::vector<optim::FusedTensor> fused;
  for (const Tensor& g : grads) {
    optim::FusedTensor f;
    f.param = g.data_ptr();
    f.numel = g.numel();
    fused.push_back(f);
  }
  optim::MultiTensorArgs args{device.is_cuda() ? device.index : 0, dtype, fused.data(), int64_t(fused.size())};
  const int64_t chunks = optim::count_chunks(fused.data(), int64_t(fused.size()));
  Tensor partials = zeros({std::max<int64_t>(chunks, 1)}, optim::optim_state_dtype(dtype), device);
  optim::norm_partials_stub(device.type)(args, std::numeric_limits<double>::infinity(), partials.data_ptr());
  // x * 0 is 0 for a finite x and NaN for inf or NaN.
  Tensor found = ne(amax(partials) * 0.0, 0.0).to(DType::Float32);
  if (inv_scale.defined()) {
    Tensor factor = inv_scale.to(optim::optim_state_dtype(dtype)).contiguous();
    optim::scale_stub(device.type)(args, factor.data_ptr());
  }
  return found;
}

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
    scale_ = full({}, pending_scale_, DType::Float32, d);
    growth_tracker_ = full({}, pending_tracker_, DType::Int32, d);
    skipped_ = zeros({}, DType::Int64, d);
  }
  return loss * scale_.to(loss.device());
}

void GradScaler::check_scale(const char* method) const {
  EMBER_CHECK(scale_.defined(), "GradScaler." << method << ": the scale is not set yet; call scaler.scale(loss) "
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
                      << describe(p) << "), which loses their small values; keep float32 master weights "
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
    TensorList dense;
    for (const Tensor& g : grads) dense.push_back(g.contiguous());
    Tensor inv_scale = unscale ? reciprocal(scale_.to(device)) : Tensor();
    Tensor found = found_inf_and_unscale(dense, device, dtype, inv_scale);
    if (unscale) {
      for (size_t i = 0; i < grads.size(); ++i) {
        if (dense[i].is_same(grads[i])) grads[i].storage()->bump_version();
        else Tensor(grads[i]).copy_(dense[i]);
      }
    }
    auto it = std::find_if(st.found_inf.begin(), st.found_inf.end(), [&](const auto& e) { return e.first == device; });
    if (it == st.found_inf.end()) st.found_inf.push_back({device, found});
    else it->second = it->second + found;
  }
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!options_.enabled) return;
  check_scale("unscale_");
  PerOptimizer& st = per_optimizer_[&optimizer];
  EMBER_CHECK(st.stage != Stage::Unscaled,
              "GradScaler.unscale_: unscale_() has already been called on this optimizer since the last update()");
  EMBER_CHECK(st.stage != Stage::Stepped, "GradScaler.unscale_: unscale_() is being called after step(); call it "
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
  EMBER_CHECK(st.stage != Stage::Stepped, "GradScaler.step: step() has already been called on this optimizer since "
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
  EMBER_CHECK(!st.found_inf.empty(), "GradScaler.step: no inf checks were recorded for this optimizer: none of its "
                                     "parameters has a gradient (run backward on scaler.scale(loss) first)");
  if (st.found_inf.size() == 1) {
    const auto& [device, found] = st.found_inf.front();
    optim::GradScaling scaling;
    scaling.found_inf = found;
    if (!unscaled) {
      NoGradGuard no_grad;
      scaling.inv_scale = reciprocal(scale_.to(device));
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
  EMBER_CHECK(found.defined(), "GradScaler.update: no inf checks were recorded prior to update(); call "
                               "scaler.step(optimizer) (or unscale_) for this iteration first");
  const GradScalerOptions& o = options_;
  Tensor inf = gt(found, 0.0);
  Tensor tracker = where(inf, Scalar(int64_t(0)), growth_tracker_ + int64_t(1));
  Tensor grow = ge(tracker, o.growth_interval);
  Tensor grown = clamp(scale_ * o.growth_factor, std::nullopt, Scalar(o.max_scale));
  grown = where(ne(grown * 0.0, 0.0), scale_, grown);  // growing must not overflow (max_scale = inf)
  Tensor backed = clamp(scale_ * o.backoff_factor, Scalar(o.min_scale), std::nullopt);
  Tensor new_scale = where(inf, backed, where(grow, grown, scale_));
  growth_tracker_.copy_(where(grow, Scalar(int64_t(0)), tracker));
  scale_.copy_(new_scale);
  skipped_.add_(inf.to(DType::Int64));
  per_optimizer_.clear();
  if (++updates_ % o.check_interval == 0) check_collapse(scale_.item<double>());
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled) return;
  check_scale("update");
  EMBER_CHECK(new_scale > 0 && std::isfinite(new_scale),
              "GradScaler.update: the new scale must be positive and finite, but is " << new_scale);
  NoGradGuard no_grad;
  scale_.fill_(new_scale);
  per_optimizer_.clear();
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
  EMBER_CHECK(s.scale > 0 && std::isfinite(s.scale), "GradScaler.load_state_dict: scale must be positive and finite, "
                                                     "but is " << s.scale);
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
    NoGradGuard no_grad;
    scale_.fill_(s.scale);
    growth_tracker_.fill_(s.growth_tracker);
  }
}

}  // namespace ember::amp
