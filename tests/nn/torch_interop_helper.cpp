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
//   torch_interop_helper optim-write adamw|sgd DIR
//     trains the MLP three steps (eval mode, so no dropout) on a fixed
//     batch, then writes DIR/model.safetensors (nn::save),
//     DIR/optim.safetensors (optim::save), DIR/io.safetensors ("input",
//     "target") and, after a fourth step, DIR/next.safetensors (nn::save)
//   torch_interop_helper optim-step adamw|sgd DIR
//     loads DIR/model.safetensors and DIR/optim.safetensors (PyTorch's),
//     takes one step on DIR/io.safetensors' batch and writes
//     DIR/next.safetensors
//   torch_interop_helper tied-write DIR
//     a token embedding whose head shares its table (weight tying):
//     DIR/model.safetensors (nn::save, the table once) and DIR/io.safetensors
//     ("input" token ids, "logits")
//   torch_interop_helper tied-run MODEL IO OUT
//     nn::load(MODEL) into the tied model; OUT gets "logits" of IO's "input"
#include <cstdio>
#include <exception>
#include <memory>
#include <string>

#include "ember/ember.h"
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

// The optimizers of the optimizer round trip; torch_interop.py builds the same.
// The rates keep the gradients well above Adam's eps over four steps on one
// batch (else their rounding noise decides the update's sign).
std::unique_ptr<optim::Optimizer> make_optimizer(const std::string& kind, nn::Module& net) {
  if (kind == "adamw") {
    optim::AdamWOptions o;
    o.lr = 1e-3;
    o.betas = {0.8, 0.99};
    o.weight_decay = 0.05;
    o.amsgrad = true;
    return std::make_unique<optim::AdamW>(net.parameters(), o);
  }
  if (kind == "sgd") {
    optim::SGDOptions o;
    o.lr = 0.05;
    o.momentum = 0.9;
    o.weight_decay = 1e-3;
    o.nesterov = true;
    return std::make_unique<optim::SGD>(net.parameters(), o);
  }
  throw Error("unknown optimizer \"" + kind + "\" (expected adamw or sgd)");
}

void train_step(nn::Sequential& net, optim::Optimizer& optimizer, const Tensor& input, const Tensor& target) {
  optimizer.zero_grad();
  nn::functional::cross_entropy(net.forward(input), target).backward();
  optimizer.step();
}

// Embedding -> Linear head sharing the embedding's table, as a GPT's.
class TiedLm : public nn::Module {
 public:
  TiedLm() {
    tok = register_module("tok", std::make_shared<nn::Embedding>(11, 6));
    head = register_module("head", std::make_shared<nn::Linear>(6, 11, false));
    head->replace_parameter("weight", tok->weight);
  }
  Tensor forward(const Tensor& ids) {
    NoGradGuard no_grad;
    return (*head)((*tok)(ids));
  }
  std::shared_ptr<nn::Module> clone() const override { return clone_as<TiedLm>(); }
  std::shared_ptr<nn::Embedding> tok;
  std::shared_ptr<nn::Linear> head;
};

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
  if ((mode == "optim-write" || mode == "optim-step") && argc == 4) {
    const std::string dir = argv[3];
    auto net = make("mlp");
    net->eval();
    auto optimizer = make_optimizer(argv[2], *net);
    if (mode == "optim-write") {
      manual_seed(3);
      const Tensor input = randn({64, 1, 28, 28});
      const Tensor target = randint(0, 10, {64});
      for (int i = 0; i < 3; ++i) train_step(*net, *optimizer, input, target);
      nn::save(*net, dir + "/model.safetensors");
      optim::save(*optimizer, dir + "/optim.safetensors");
      save_safetensors(dir + "/io.safetensors", {{"input", input}, {"target", target}});
      train_step(*net, *optimizer, input, target);
    } else {
      nn::load(*net, dir + "/model.safetensors");
      optim::load(*optimizer, dir + "/optim.safetensors");
      const auto io = load_safetensors(dir + "/io.safetensors").tensors;
      train_step(*net, *optimizer, io.at("input"), io.at("target"));
    }
    nn::save(*net, dir + "/next.safetensors");
    return 0;
  }
  if (mode == "tied-write" && argc == 3) {
    manual_seed(8);
    TiedLm lm;
    const std::string dir = argv[2];
    nn::save(lm, dir + "/model.safetensors");
    const Tensor ids = randint(0, 11, {2, 5});
    save_safetensors(dir + "/io.safetensors", {{"input", ids}, {"logits", lm.forward(ids)}});
    return 0;
  }
  if (mode == "tied-run" && argc == 5) {
    TiedLm lm;
    nn::load(lm, argv[2]);
    if (!lm.head->weight.is_same(lm.tok->weight)) throw Error("nn::load untied the head from the embedding");
    save_safetensors(argv[4], {{"logits", lm.forward(load_safetensors(argv[3]).tensors.at("input"))}});
    return 0;
  }
  std::fprintf(stderr,
               "usage: torch_interop_helper write mlp|cnn f32|bf16|f16 DIR\n"
               "       torch_interop_helper run mlp|cnn MODEL IO OUT\n"
               "       torch_interop_helper optim-write|optim-step adamw|sgd DIR\n"
               "       torch_interop_helper tied-write DIR\n"
               "       torch_interop_helper tied-run MODEL IO OUT\n");
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
