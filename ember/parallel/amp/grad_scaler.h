// amp::GradScaler: dynamic loss scaling for float16 training, as
// torch.amp.GradScaler.
//
//   amp::GradScaler scaler;
//   for (...) {
//     optimizer.zero_grad();
//     Tensor loss;
//     { amp::autocast guard(DType::Float16); loss = criterion(model->forward(x), y); }
//     scaler.scale(loss).backward();
//     scaler.unscale_(optimizer);                        // optional: only to clip the true gradients
//     optim::clip_grad_norm_(model->parameters(), 1.0);
//     scaler.step(optimizer);                            // skipped when a gradient is inf or NaN
//     scaler.update();
//   }
//
// Contract:
// - Defaults are PyTorch's: initial scale 2^16, growth_factor 2 after
//   growth_interval = 2000 consecutive steps without inf/NaN, backoff_factor
//   0.5 on a step with one. ember adds bounds: the scale never grows past
//   max_scale (2^24 by default; infinity gives PyTorch's unbounded growth,
//   which stops only where the scale would overflow) nor falls below
//   min_scale (2^-24).
// - scale(loss) multiplies by the current scale (a one-element float32
//   tensor, created on the loss's device at the first call). backward() of
//   the scaled loss without a gradient gives the loss the scale itself as
//   its gradient (no seed, no multiply); a scale changed between scale()
//   and that backward is an ember::Error.
// - unscale_(optimizer) divides every gradient of the optimizer's
//   parameters by the scale in place and records, per device, whether any
//   was inf or NaN; at most once per optimizer between update()s and never
//   after step(). Float16 gradients are an ember::Error here, as in PyTorch:
//   unscaling them in place loses their small values; keep float32 master
//   weights (amp::MasterWeights) and unscale the optimizer of those.
// - step(optimizer) runs optimizer.step() unless a gradient is inf or NaN,
//   in which case parameters and optimizer state (step counters included)
//   stay exactly as they were. When all of the optimizer's gradients are on
//   one device, nothing synchronizes: the inf check, the decision and the
//   unscale happen on the device (the fused optimizer kernels read found_inf
//   and 1 / scale themselves, see ember/optim/optimizer.h; after unscale_ only
//   found_inf). Over several devices step reads the found-inf flags on the
//   host first, as PyTorch's does. A parameter without grad is left alone;
//   an optimizer none of whose parameters has a gradient is an ember::Error
//   ("no inf checks were recorded").
// - update() (once per iteration, after the step()s) updates the scale on
//   its device from the found-inf flags of every optimizer stepped since the
//   last update: times backoff_factor (and the growth tracker reset) if any
//   was set, else the tracker advances and the scale grows by growth_factor
//   when it reaches growth_interval. update(new_scale) sets the scale.
//   With one optimizer on one device the update kernel also resets that
//   optimizer's found-inf flag, which the next iteration reuses (no fill
//   kernel per step).
// - Skipped steps are visible: skipped_steps() counts the steps skipped so
//   far and get_scale() returns the current scale; both read the device
//   (they synchronize; they are for logs, not for the hot loop).
// - A collapsed scale is an error, not an endless run of skipped steps: a
//   scale at min_scale means that even a loss scaled down by 2^24 below 1
//   gave inf/NaN gradients, i.e. the loss or the gradients are inf/NaN at
//   every step (the loss is NaN or the model diverged). Healthy float16
//   training keeps its scale within a few factors of 2 of the largest value
//   its gradients allow, far above that. To keep the hot loop free of
//   host-device synchronization the host looks at the scale only every
//   check_interval update()s (100: one read per 100 steps) and whenever
//   get_scale() or skipped_steps() is called; there update() (or the
//   getter) throws an ember::Error naming the scale, the skipped steps and
//   what to check. The floor also keeps 1 / scale finite. A step replayed
//   from a CUDA graph runs no host code, so there only the getters check.
// - enabled = false makes every method a pass-through: scale returns the
//   loss, step calls optimizer.step(), update does nothing.
// - state_dict()/load_state_dict() carry what PyTorch's do (scale,
//   growth_factor, backoff_factor, growth_interval, growth tracker);
//   loading before the first scale() sets the scale it starts from.
#pragma once

#include <cstdint>
#include <limits>
#include <unordered_map>
#include <vector>

#include "ember/core/device.h"
#include "ember/core/tensor.h"
#include "ember/optim/optimizer.h"

namespace ember::amp {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  double max_scale = 16777216.0;        // 2^24
  double min_scale = 1.0 / 16777216.0;  // 2^-24
  int64_t check_interval = 100;         // update()s between the host's looks at the scale
  bool enabled = true;
};

// What torch.amp.GradScaler.state_dict() holds.
struct GradScalerState {
  double scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  int64_t growth_tracker = 0;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  Tensor scale(const Tensor& loss);
  void unscale_(optim::Optimizer& optimizer);
  void step(optim::Optimizer& optimizer);
  void update();
  void update(double new_scale);

  bool is_enabled() const { return options_.enabled; }
  // These read the device (see the contract).
  double get_scale();
  int64_t skipped_steps();
  int64_t growth_tracker();

  GradScalerState state_dict();
  void load_state_dict(const GradScalerState& state);

  const GradScalerOptions& options() const { return options_; }

 private:
  enum class Stage { Ready, Unscaled, Stepped };
  struct PerOptimizer {
    Stage stage = Stage::Ready;
    std::vector<std::pair<Device, Tensor>> found_inf;  // per device: one float32, non-zero when inf/NaN was seen
  };

  void check_scale(const char* method) const;
  // Fills st.found_inf from the optimizer's gradients; with inv_scale also
  // multiplies them by it.
  void check_and_unscale(optim::Optimizer& optimizer, PerOptimizer& st, bool unscale);
  void check_collapse(double scale);
  // Sets the scale on its device, and its reciprocal.
  void fill_scale(double scale);

  GradScalerOptions options_;
  Tensor scale_;      // () float32 on the scale's device, undefined before the first scale()
  Tensor inv_scale_;  // () float32 beside it: 1.0f / scale, kept with it (no reciprocal kernel per step)
  // A found-inf flag the last update() reset to 0, for the next check of
  // the optimizer it belonged to (undefined when there is none).
  const optim::Optimizer* reset_flag_owner_ = nullptr;
  Tensor reset_flag_;
  Tensor growth_tracker_;  // () int32 beside it
  Tensor skipped_;         // () int64 beside it
  double pending_scale_;   // for the first scale()
  int64_t pending_tracker_ = 0;
  int64_t updates_ = 0;
  std::unordered_map<const optim::Optimizer*, PerOptimizer> per_optimizer_;
};

}  // namespace ember::amp
