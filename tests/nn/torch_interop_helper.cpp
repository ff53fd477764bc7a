// The ember side of tests/nn/torch_interop.py: writes ember-train's networks
// (examples/train/models.h) with random weights, and runs networks whose
// weights PyTorch wrote; no dataset needed. Files are safetensors:
//
//   torch_interop_helper write mlp|cnn f32|bf16|f16 DIR
//     DIR/model.safetensors  nn::save of the network (its floating tensors
//                            in the given dtype; the BatchNorm statistics
//                            random, so that they matter)
//     DIR/io.safetensors     "input" (4, 1, 28, 28) and "logits" (4, 10):
//                            the float32 eval-mode forward of those weights
//   torch_interop_helper run mlp|cnn MODEL IO OUT
//     nn::load(MODEL) into the network, then OUT gets "logits" of IO's
//     "input" in eval mode.
#include <cstdio>
#include <exception>
#include <string>

#include "ember.h"
#include "examples/train/models.h"

namespace {

using namespace ember;

std::shared_ptr<nn::Sequential> make(const std::string& kind) {
  if (kind == "mlp") return train::make_mlp({256, 128}, 0.2);
  if (kind == "cnn") return train::make_cnn(0.25);
  throw Error("unknown network \"" + kind + "\" (expected mlp or cnn)");
}

DType dtype_of(const std::string& name) {
  if (name == "f32") return DType::Float32;
  if (name == "bf16") return DType::BFloat16;
  if (name == "f16") return DType::Float16;
  throw Error("unknown dtype \"" + name + "\" (expected f32, bf16 or f16)");
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// BatchNorm's statistics and affine parameters away from their defaults.
void randomize_batch_norm(nn::Module& net) {
  NoGradGuard no_grad;
  const auto state = net.state_dict();
  for (const auto& item : state) {
    const std::string& key = item.key;
    const std::string prefix = key.substr(0, key.rfind('.') + 1);
    if (!state.contains(prefix + "running_mean")) continue;
    Tensor t = item.value;
    if (ends_with(key, "num_batches_tracked")) t.fill_(5);
    else if (ends_with(key, "running_var") || ends_with(key, "weight")) t.copy_(rand(t.shape()) + 0.5);
    else t.copy_(randn(t.shape()) * 0.1);
  }
}

Tensor logits(nn::Sequential& net, const Tensor& input) {
  NoGradGuard no_grad;
  net.eval();
  return net.forward(input);
}

int run(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "write" && argc == 5) {
    manual_seed(1);
    auto net = make(argv[2]);
    randomize_batch_norm(*net);
    const std::string dir = argv[4];
    net->to(dtype_of(argv[3]));
    nn::save(*net, dir + "/model.safetensors", {{"written_by", "torch_interop_helper"}});
    net->to(DType::Float32);  // the rounded weights, computed in float32
    const Tensor input = randn({4, 1, 28, 28});
    save_safetensors(dir + "/io.safetensors", {{"input", input}, {"logits", logits(*net, input)}});
    return 0;
  }
  if (mode == "run" && argc == 6) {
    auto net = make(argv[2]);
    nn::load(*net, argv[3]);
    const Tensor input = load_safetensors(argv[4]).tensors.at("input");
    save_safetensors(argv[5], {{"logits", logits(*net, input)}});
    return 0;
  }
  std::fprintf(stderr,
               "usage: torch_interop_helper write mlp|cnn f32|bf16|f16 DIR\n"
               "       torch_interop_helper run mlp|cnn MODEL IO OUT\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "torch_interop_helper: %s\n", e.what());
    return 1;
  }
}
