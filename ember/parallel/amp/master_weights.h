// "O2" mixed precision: a model cast to float16/bfloat16 except its
// BatchNorm layers, trained through float32 master copies of its weights
// that the optimizer holds.
//
//   amp::cast_to_half(*model, DType::Float16);           // BatchNorm stays float32
//   amp::MasterWeights master(model->parameters());
//   optim::Adam optimizer(master.params(), options);     // steps the float32 copies
//   amp::GradScaler scaler;
//   for (...) {
//     model->zero_grad();
//     Tensor loss = criterion(model->forward(x.to(DType::Float16)).to(DType::Float32), y);
//     scaler.scale(loss).backward();                     // float16 gradients on the model
//     master.grads_to_master();                          // float32 copies on the masters
//     scaler.step(optimizer);                            // unscale + inf check + step, in float32
//     scaler.update();
//     master.master_to_model();                          // the stepped weights, rounded back
//   }
//
// Contract:
// - cast_to_half(module, dtype) converts every floating parameter and buffer
//   of the module tree to dtype (float16 or bfloat16), in place as
//   Module::to does, except those of nn::BatchNorm1d/2d layers, which keep
//   their float32 values exactly (batch_norm takes a half input with float32
//   parameters and statistics, see ember/core/ops.h). The module must be held by a
//   shared_ptr (Module::modules() needs it).
// - MasterWeights(params) keeps a float32 copy (a fresh leaf requiring grad)
//   of every float16/bfloat16 parameter; a float32 or float64 parameter is
//   its own master (no copy). params() lists the masters in the order of
//   the parameters: build the optimizer on them.
// - grads_to_master() gives each master the float32 value of its
//   parameter's gradient (no gradient: the master's is dropped), reusing the
//   master's gradient tensor once it has one. master_to_model() copies the
//   masters into the parameters, rounding to their dtype. Both work on any
//   device through copy_ (one copy per parameter).
// - The parameters must not be replaced (Module::to) after the masters are
//   made; the masters follow them only through these two calls.
#pragma once

#include "ember/core/dtype.h"
#include "ember/core/tensor.h"
#include "ember/nn/module.h"

namespace ember::amp {

void cast_to_half(nn::Module& module, DType dtype = DType::Float16);

class MasterWeights {
 public:
  explicit MasterWeights(const TensorList& params);

  const TensorList& params() const { return masters_; }
  const TensorList& model_params() const { return params_; }

  void grads_to_master();
  void master_to_model();

 private:
  TensorList params_;
  TensorList masters_;
};

}  // namespace ember::amp
