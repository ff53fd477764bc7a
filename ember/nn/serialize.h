// nn::save and nn::load: a module's state dict in one safetensors file
// (ember/nn/safetensors.h) that PyTorch reads and writes with its own names, so a
// model moves between ember and PyTorch in one line on each side:
//
//   ember -> PyTorch   nn::save(*net, "net.safetensors");
//                      net.load_state_dict(safetensors.torch.load_file("net.safetensors"))
//   PyTorch -> ember   safetensors.torch.save_file(net.state_dict(), "net.safetensors")
//                      nn::load(*net, "net.safetensors");
//
// (tests/nn/torch_interop.py does the same without the safetensors package,
// in a few lines of numpy, for ember-train's MLP and CNN.)
//
// Contract:
// - The keys are state_dict()'s: the dotted names PyTorch's state_dict()
//   gives the same tree ("0.weight", "layers.1.bias", a BatchNorm's
//   "running_mean", "running_var", and "num_batches_tracked" as a scalar
//   int64). Parameterless layers (ReLU, Flatten, Dropout) keep their index
//   in a Sequential, as in torch.nn.Sequential. Each tensor is written in
//   the module's dtype (float32 unless to(dtype) changed it), densely, from
//   any device. The file carries ember's checksums in its metadata
//   (PyTorch ignores them) and the caller's metadata.
// - A tied tensor (Module::replace_parameter; several names, one tensor) is
//   written once, as safetensors.torch.save_model does: under the first of
//   its names in byte order, each other name recorded in the metadata as
//   "<other name>": "<kept name>" (unless the caller's metadata has that
//   key). safetensors.torch.load_model reads such a file into PyTorch.
// - load reads the file (verifying the checksums when it has them; files
//   from PyTorch have none), checks every entry before changing anything,
//   then copies the values in place as Module::load_state_dict does:
//   floating values of any floating dtype (F32, F16, BF16, F64) are cast to
//   the module's dtype and moved to its device; integral ones must match
//   exactly. Errors name the file and the key, with the expected and found
//   shape or dtype; with strict (the default), missing and unexpected keys
//   are errors listing each; without, they are returned. A tied tensor
//   loads from any one of its names and the tie is kept (values are copied
//   into the one tensor); a file with several of its names must hold equal
//   values under them (else an error naming both keys).
#pragma once

#include <map>
#include <string>

#include "ember/nn/module.h"

namespace ember::nn {

void save(const Module& module, const std::string& path, const std::map<std::string, std::string>& metadata = {});

LoadStateDictResult load(Module& module, const std::string& path, bool strict = true);

}  // namespace ember::nn
