// ember::amp::autocast: automatic mixed precision for a scope, as
// torch.autocast.
//
//   {
//     amp::autocast guard(DType::Float16);             // CUDA, float16
//     Tensor loss = criterion(model->forward(x), y);   // linear/conv in float16, loss in float32
//   }
//   scaler.scale(loss).backward();                     // backward outside the region
//
// Contract:
// - Inside the guard's scope, on this thread, ops on tensors of the guard's
//   device type follow the autocast policy (ember/core/autocast_state.h): matmul,
//   linear, conv2d and scaled_dot_product_attention run in the guard's
//   dtype (float16 or bfloat16: tensor cores on the GPU), softmax,
//   log_softmax, layer_norm, the reductions sum, mean, var, std, logsumexp
//   and the losses in float32; batch_norm keeps
//   float32 statistics. Ops on other device types and every op outside the
//   scope are unchanged.
// - Guards nest: an inner guard replaces the setting of its device type
//   (enabled = false turns autocast off inside an autocast region, e.g. for
//   an op that must run in float32) and the outer setting comes back when
//   it ends. The weight-cast cache lives until the outermost guard ends;
//   linear's casts of its weight and bias are kept from step to step and
//   made anew, all in one launch, once the weights change
//   (ember/core/autocast_state.h).
// - dtype defaults to the thread's current autocast dtype of that device
//   type: float16 for CUDA and bfloat16 for the CPU unless an enclosing
//   guard chose another. Any other dtype than float16 or bfloat16 is an
//   ember::Error.
// - Run backward after the scope ends (backward ops use the dtypes of their
//   forward ops whatever the autocast state, see ember/core/autograd/engine.h).
// - The state is per thread: a thread started inside the scope does not
//   inherit it (copy it with autocast_state::get_state()/set_state()).
#pragma once

#include <optional>

#include "ember/core/autocast_state.h"
#include "ember/core/device.h"
#include "ember/core/dtype.h"

namespace ember::amp {

class autocast {
 public:
  explicit autocast(DeviceType device_type = DeviceType::CUDA, std::optional<DType> dtype = std::nullopt,
                    bool enabled = true, bool cache_enabled = true);
  explicit autocast(DType dtype, DeviceType device_type = DeviceType::CUDA, bool enabled = true)
      : autocast(device_type, dtype, enabled) {}
  ~autocast();
  autocast(const autocast&) = delete;
  autocast& operator=(const autocast&) = delete;

 private:
  autocast_state::State saved_;
};

bool is_autocast_enabled(DeviceType device_type = DeviceType::CUDA);
DType get_autocast_dtype(DeviceType device_type = DeviceType::CUDA);
// Frees this thread's cached casts, those kept from step to step too
// (torch.clear_autocast_cache()).
void clear_autocast_cache();

}  // namespace ember::amp
