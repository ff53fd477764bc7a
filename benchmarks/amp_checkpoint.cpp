// amp_checkpoint: the step time and memory of a deep MLP in float32 and in
// mixed precision, each with and without activation checkpointing
// (parallel::checkpoint_sequential), as a markdown table.
//
// Model: `depth` blocks of Linear(width, width) + GELU, then LayerNorm and
// Linear(width, 10); AdamW; cross-entropy on random inputs and labels made
// on the device once. Checkpointing splits the blocks into 4 segments.
// Mixed precision is amp::autocast (float16 with an amp::GradScaler on
// CUDA; bfloat16 on the CPU, PyTorch's CPU default, or --dtype fp16|bf16).
//
// Timing: on cuda:0 when a GPU is visible, the median over 20 steps (after
// 3 warm-up steps) between CUDA events; memory is the peak of
// cuda::memory_allocated during one step above what was allocated before
// it. Without a GPU, the median wall time of 5 steps after 1 warm-up, and
// memory is the peak of the bytes held for backward (activations saved by
// the ops, counted through saved-tensor hooks; parameters excluded), which
// is what checkpointing reduces; the recomputed segment during backward is
// not in that count.
//
//   amp_checkpoint [--device cpu|cuda] [--dtype fp16|bf16] [--width N] [--depth N] [--batch N]
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "benchmarks/bench_util.h"
#include "ember/ember.h"
#if EMBER_WITH_CUDA
#include "ember/core/cuda/caching_allocator.h"
#endif

namespace {

using namespace ember;

// Live bytes of the activations saved for backward, and their peak.
class SavedBytes final : public autograd::SavedTensorHooks {
 public:
  struct Packed final : autograd::PackedTensor {
    Tensor t;
    SavedBytes* owner = nullptr;
    size_t bytes = 0;
    ~Packed() override { owner->live -= bytes; }
    Tensor unpack() override { return t; }
  };
  std::shared_ptr<autograd::PackedTensor> pack(const Tensor& t) override {
    auto p = std::make_shared<Packed>();
    p->t = t;
    p->owner = this;
    p->bytes = t.is_leaf() && t.requires_grad() ? 0 : size_t(t.numel()) * t.element_size();
    live += p->bytes;
    peak = std::max(peak, live);
    return p;
  }
  size_t live = 0, peak = 0;
};

struct Config {
  Device device = kCPU;
  DType low = DType::BFloat16;
  int64_t width = 512, depth = 16, batch = 256;
  int warmup = 1, steps = 5;
};

struct Row {
  double median_ms = 0;
  double memory_mib = 0;
  double skipped = 0;
};

Row measure(const Config& c, bool mixed, bool ckpt) {
  manual_seed(0);
  auto model = std::make_shared<nn::Sequential>();
  for (int64_t i = 0; i < c.depth; ++i) {
    model->push_back(std::make_shared<nn::Linear>(c.width, c.width));
    model->push_back(std::make_shared<nn::GELU>());
  }
  model->push_back(std::make_shared<nn::LayerNorm>(Shape{c.width}));
  model->push_back(std::make_shared<nn::Linear>(c.width, 10));
  model->to(c.device);
  optim::AdamW optimizer(model->parameters());
  std::optional<amp::GradScaler> scaler;
  if (mixed && c.low == DType::Float16) scaler.emplace();
  const Tensor input = randn({c.batch, c.width}, DType::Float32, c.device);
  const Tensor target = randint(0, 10, {c.batch}, DType::Int64, c.device);
  SavedBytes saved;
  auto step = [&] {
    Tensor loss;
    {
      autograd::SavedTensorHooksGuard count(c.device.is_cpu() ? &saved : nullptr);
      std::optional<amp::autocast> autocast;
      if (mixed) autocast.emplace(c.device.type, c.low);
      Tensor out = ckpt ? parallel::checkpoint_sequential(*model, 4, input) : model->forward(input);
      loss = nn::functional::cross_entropy(out, target);
    }
    optimizer.zero_grad();
    bench::backward_and_step(loss, optimizer, scaler ? &*scaler : nullptr);
  };
  for (int i = 0; i < c.warmup; ++i) step();
  Row r;
  size_t base = 0;
#if EMBER_WITH_CUDA
  if (c.device.is_cuda()) {
    cuda::synchronize(c.device.index);
    base = cuda::memory_allocated(c.device.index);
    cuda::reset_peak_memory_stats(c.device.index);
  }
#endif
  saved.peak = 0;
  r.median_ms = bench::median(bench::time_steps(c.device, 0, c.steps, step));
  size_t peak = saved.peak;
#if EMBER_WITH_CUDA
  if (c.device.is_cuda()) peak = cuda::max_memory_allocated(c.device.index) - base;
#endif
  r.memory_mib = double(peak) / (1 << 20);
  r.skipped = scaler ? double(scaler->skipped_steps()) : 0;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Flags flags(argc, argv,
                     "amp_checkpoint [--device cpu|cuda] [--dtype fp16|bf16] [--width N] [--depth N] [--batch N]");
  Config c;
  c.device = flags.device();
  const bool use_gpu = c.device.is_cuda();
  const std::string dtype = flags.text("--dtype", use_gpu ? "fp16" : "bf16", {"fp16", "bf16"});
  c.low = dtype == "fp16" ? DType::Float16 : DType::BFloat16;
  c.width = flags.count("--width", use_gpu ? 4096 : 512, 1 << 20);
  c.depth = flags.count("--depth", c.depth, 1 << 20);
  c.batch = flags.count("--batch", use_gpu ? 4096 : 256, 1 << 20);
  flags.finish();
  if (c.depth < 4) flags.fail("--depth: checkpoint_sequential's 4 segments need at least 4 blocks");
  if (use_gpu) {
    c.warmup = 3;
    c.steps = 20;
  }

  std::printf(
      "ember amp_checkpoint: %lld x (Linear %lld-%lld + GELU), batch %lld, AdamW; median of %d steps on %s; "
      "memory: %s\n\n",
      static_cast<long long>(c.depth), static_cast<long long>(c.width), static_cast<long long>(c.width),
      static_cast<long long>(c.batch), c.steps, c.device.str().c_str(),
      use_gpu ? "peak memory_allocated in a step" : "peak bytes saved for backward");
  std::printf("| precision | checkpoint | ms/step | memory MiB | skipped steps |\n|---|---|---:|---:|---:|\n");
  int status = 0;
  for (bool mixed : {false, true}) {
    for (bool ckpt : {false, true}) {
      const std::string precision = mixed ? std::string("amp ") + dtype_name(c.low) : "float32";
      try {
        const Row r = measure(c, mixed, ckpt);
        std::printf("| %s | %s | %.2f | %.1f | %.0f |\n", precision.c_str(), ckpt ? "4 segments" : "none", r.median_ms,
                    r.memory_mib, r.skipped);
      } catch (const Error& e) {
        std::printf("| %s | %s | failed | | |\n", precision.c_str(), ckpt ? "4 segments" : "none");
        std::fprintf(stderr, "%s: %s\n", precision.c_str(), e.what());
        status = 1;
      }
      std::fflush(stdout);
    }
  }
  return status;
}
