// What benchmarks/dp_vs_ddp trains: the model, its batches, its loss and
// optimizer, and the precision of the step. benchmarks/dp_vs_ddp_torch.py
// mirrors every choice made here.
//
//   mlp   examples/train/models.h's MLP widened to 784-1024-1024-10, no
//         dropout; SGD lr 0.01, momentum 0.9; random (N, 1, 28, 28) images
//         and labels in [0, 10)
//   cnn   examples/train/models.h's CNN, dropout 0.25; the same optimizer
//         and inputs
//   gpt   ember-gpt's model (examples/gpt/model.h) at dp_vs_ddp_gpt() with
//         the given shape: head untied, exact GELU, PyTorch's default
//         initialization, no dropout; AdamW lr 3e-4 (weight decay 0.01);
//         random token ids (N, context) in [0, vocab) and next-token
//         targets of the same shape
// Throughput counts samples for mlp and cnn, tokens (N * context) for gpt.
//
// Precision: "fp32", or "amp": on CUDA float16 autocast with a GradScaler
// ("amp-fp16"), on the CPU bfloat16 autocast without one ("amp-bf16",
// PyTorch's CPU autocast default; bfloat16 has float32's range, so no loss
// scaling). step() is one training step: forward and loss under autocast,
// zero_grad (set to none), backward, optimizer step (through the scaler).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "benchmarks/bench_util.h"
#include "ember/ember.h"
#include "examples/gpt/model.h"
#include "examples/train/models.h"

namespace ember::bench {

struct Precision {
  std::string name;               // "fp32", "amp-fp16", "amp-bf16"
  std::optional<DType> autocast;  // the autocast dtype; none for fp32
  bool loss_scaling = false;      // a GradScaler (float16)

  // "fp32" or "amp" on a device of `type`.
  static Precision of(const std::string& choice, DeviceType type) {
    if (choice == "fp32") return {"fp32", std::nullopt, false};
    if (type == DeviceType::CUDA) return {"amp-fp16", DType::Float16, true};
    return {"amp-bf16", DType::BFloat16, false};
  }
};

// dp_vs_ddp's default GPT: GPT-2 small's layers at context 256, the head
// untied, GELU exact (erf), PyTorch's default initialization: 162,447,360
// parameters.
inline gpt::GptConfig dp_vs_ddp_gpt() {
  gpt::GptConfig config = gpt::GptConfig::gpt2_small();
  config.context = 256;
  config.tied_head = false;
  config.gelu = "none";
  config.init = gpt::GptInit::PyTorch;
  return config;
}

struct Workload {
  std::string model;                     // "mlp", "cnn" or "gpt"
  gpt::GptConfig gpt = dp_vs_ddp_gpt();  // for "gpt"
  int64_t batch = 0;                     // samples per device

  bool is_gpt() const { return model == "gpt"; }
  const char* unit() const { return is_gpt() ? "tokens" : "samples"; }
  int64_t units_per_sample() const { return is_gpt() ? gpt.context : 1; }
  // Without commas, for the CSV: "784-1024-1024-10", "L12 W768 H12 T256 V50257".
  std::string shape() const {
    if (model == "mlp") return "784-1024-1024-10";
    if (model == "cnn") return "conv32-conv64-fc128-10 dropout 0.25";
    return "L" + std::to_string(gpt.layers) + " W" + std::to_string(gpt.width) + " H" + std::to_string(gpt.heads) +
           " T" + std::to_string(gpt.context) + " V" + std::to_string(gpt.vocab);
  }

  // The same parameters on every call (and every rank): seeded with 0.
  std::shared_ptr<nn::UnaryModule> make_model() const {
    manual_seed(0);
    if (model == "mlp") return train::make_mlp({1024, 1024}, 0);
    if (model == "cnn") return train::make_cnn(0.25);
    return std::make_shared<gpt::Gpt>(gpt);
  }

  std::unique_ptr<optim::Optimizer> make_optimizer(const TensorList& params) const {
    if (is_gpt()) {
      optim::AdamWOptions o;
      o.lr = 3e-4;
      return std::make_unique<optim::AdamW>(params, o);
    }
    optim::SGDOptions o;
    o.lr = 0.01;
    o.momentum = 0.9;
    return std::make_unique<optim::SGD>(params, o);
  }

  // A batch of `samples` on `device`: {input, target}; seed makes ranks differ.
  std::pair<Tensor, Tensor> make_batch(int64_t samples, Device device, uint64_t seed) const {
    manual_seed(seed);
    if (is_gpt()) {
      return {randint(0, gpt.vocab, {samples, gpt.context}, DType::Int64, device),
              randint(0, gpt.vocab, {samples, gpt.context}, DType::Int64, device)};
    }
    return {randn({samples, 1, train::kImageSide, train::kImageSide}, DType::Float32, device),
            randint(0, train::kClasses, {samples}, DType::Int64, device)};
  }

  Tensor loss(const Tensor& output, const Tensor& target) const {
    return is_gpt() ? gpt::Gpt::loss(output, target) : nn::functional::cross_entropy(output, target);
  }
};

// One training step of `model` (the module itself, or a DataParallel or
// DDP around it) on a fixed batch; `device_type` is the autocast's.
class TrainStep {
 public:
  TrainStep(const Workload& workload, nn::UnaryModule& model, optim::Optimizer& optimizer, const Precision& precision,
            DeviceType device_type, Tensor input, Tensor target)
      : workload_(workload),
        model_(model),
        optimizer_(optimizer),
        precision_(precision),
        device_type_(device_type),
        input_(std::move(input)),
        target_(std::move(target)) {
    if (precision.loss_scaling) scaler_.emplace();
  }

  void operator()() {
    Tensor loss;
    {
      std::optional<amp::autocast> autocast;
      if (precision_.autocast) autocast.emplace(device_type_, *precision_.autocast);
      loss = workload_.loss(model_.forward(input_), target_);
    }
    optimizer_.zero_grad();
    bench::backward_and_step(loss, optimizer_, scaler_ ? &*scaler_ : nullptr);
  }

 private:
  const Workload& workload_;
  nn::UnaryModule& model_;
  optim::Optimizer& optimizer_;
  const Precision precision_;
  const DeviceType device_type_;
  const Tensor input_, target_;
  std::optional<amp::GradScaler> scaler_;
};

}  // namespace ember::bench
