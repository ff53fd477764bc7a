// optim::save and optim::load: an optimizer's state dict in one safetensors
// file laid out as PyTorch's optimizer.state_dict(), so that a run moves
// between ember and PyTorch with its optimizer state, as nn::save/nn::load
// (ember/nn/serialize.h) move the model:
//
//   tensors   "state.<index>.<name>"  the state of parameter <index> (indices
//                                     run over the groups' parameters in
//                                     order, as PyTorch's): "exp_avg",
//                                     "exp_avg_sq", "max_exp_avg_sq",
//                                     "momentum_buffer", and "step" as a
//                                     0-dim float32 tensor (PyTorch 2.x's)
//   metadata  "param_groups"          JSON: PyTorch's state_dict()["param_groups"],
//                                     with PyTorch's option names ("lr",
//                                     "betas": [b1, b2], "eps",
//                                     "weight_decay", "amsgrad": bool,
//                                     "momentum", "dampening", "nesterov":
//                                     bool) and "params": [indices]
//             "optimizer"             "Adam", "AdamW" or "SGD"
//
// In Python (tests/nn/torch_interop.py does exactly this):
//   tensors = safetensors.torch.load_file(path)
//   meta = safetensors.safe_open(path, "pt").metadata()
//   state = {}
//   for key, t in tensors.items():
//       _, index, name = key.split(".", 2)
//       state.setdefault(int(index), {})[name] = t
//   optimizer.load_state_dict({"state": state, "param_groups": json.loads(meta["param_groups"])})
// and the reverse writes the same names from optimizer.state_dict().
//
// Contract:
// - save writes every group and every parameter's state (copies, from any
//   device) atomically, with save_safetensors' checksums.
// - load checks the whole file against the optimizer before it changes
//   anything (Optimizer::load_state_dict's checks, plus: "optimizer", when
//   present, names this optimizer; every group option is one this optimizer
//   knows). PyTorch's options that change no result in ember are accepted
//   and ignored: "foreach", "fused", "capturable" (ember's steps are always
//   fused and capturable) and "initial_lr" (a scheduler's record; ember's
//   schedulers keep their base lrs in their own state). "maximize" and
//   "differentiable" must be false, "decoupled_weight_decay" must be what
//   the optimizer does (true for AdamW): ember has no such variants. Any
//   other key is an ember::Error naming the file, the group and the key.
//   PyTorch's SGD keeps no "step": a state with a momentum buffer and no
//   step is loaded as one update done, which is what the buffer means.
// - Errors name the file and the key.
#pragma once

#include <string>

#include "ember/optim/optimizer.h"

namespace ember::optim {

void save(const Optimizer& optimizer, const std::string& path);
void load(Optimizer& optimizer, const std::string& path);

}  // namespace ember::optim
