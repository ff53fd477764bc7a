// attention: causal scaled-dot-product attention alone
// (nn::functional::scaled_dot_product_attention(q, k, v, {}, 0.0,
// is_causal = true)), forward and forward + backward, as a markdown table.
// benchmarks/attention_torch.py prints the same table for PyTorch's
// F.scaled_dot_product_attention on its flash backend.
//
// Shapes follow FlashAttention's benchmarks: q, k and v contiguous
// (B, H, T, D) with B T = --tokens (a list) and H D = --width (2048), for
// each head dim D in --head-dims (64,128) and length T in --contexts
// (1024,2048,4096), in each of --dtypes (bf16,fp16); inputs N(0, 1).
// forward times the op under NoGradGuard; fwd+bwd the op on inputs that
// require grad and autograd::grad of q, k and v for a random output
// gradient (no accumulation into .grad).
//
// Each figure is the median of --steps runs after --warmup (bench::
// time_steps: CUDA events, waiting for each run's end). FLOPs, causal (half
// the T x T scores): forward 4 B H T T D / 2 (QK^T and PV); backward 2.5x
// the forward (five matmuls against two), so fwd+bwd counts 3.5x the
// forward's FLOPs. A shape that runs out of device memory reads "OOM".
//
// On CUDA, --path times each listed path of the fused attention
// (ember/kernels/cuda/attention_path.h), forced for both directions: auto
// (the faster fused route per shape, chosen at the shape's first call, a
// warm-up), tensor_core (ember's kernels), cudnn (cuDNN's fused attention),
// simt; a path that cannot take a shape reads "failed", its reason on stderr.
//
//   attention [--tokens 16384,65536] [--width 2048] [--head-dims 64,128]
//             [--contexts 1024,2048,4096] [--dtypes bf16,fp16] [--steps 20]
//             [--warmup 5] [--device cpu|cuda] [--path auto,tensor_core,cudnn,simt]
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "benchmarks/bench_util.h"
#include "ember/ember.h"
#if EMBER_WITH_CUDA
#include "ember/core/cuda/device.h"
#include "ember/kernels/cuda/attention_path.h"
#endif

namespace {

using namespace ember;

struct Options {
  std::vector<int64_t> tokens, head_dims, contexts;
  std::vector<std::string> dtypes, paths;
  int64_t width = 2048;
  int steps = 20, warmup = 5;
  Device device = kCPU;
};

struct Shape4 {
  int64_t B, H, T, D;
};

// Causal attention's forward FLOPs: QK^T and PV over half the scores.
double forward_flops(const Shape4& s) { return 4.0 * double(s.B * s.H) * double(s.T) * double(s.T * s.D) / 2.0; }

double median_ms(const Options& o, const std::function<void()>& run) {
  return bench::median(bench::time_steps(o.device, o.warmup, o.steps, run));
}

// The milliseconds of the forward and of forward + backward.
std::pair<double, double> measure(const Options& o, const Shape4& s, DType dtype) {
  manual_seed(0);
  auto input = [&] { return randn({s.B, s.H, s.T, s.D}, DType::Float32, o.device).to(dtype); };
  Tensor q = input(), k = input(), v = input();
  const Tensor grad_out = input();
  auto attend = [&] { return nn::functional::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true); };
  double forward_ms = 0;
  {
    NoGradGuard no_grad;
    forward_ms = median_ms(o, [&] { (void)attend(); });
  }
  q.set_requires_grad();
  k.set_requires_grad();
  v.set_requires_grad();
  const double both_ms = median_ms(o, [&] { (void)autograd::grad({attend()}, {q, k, v}, {grad_out}); });
  return {forward_ms, both_ms};
}

#if EMBER_WITH_CUDA
// Forces the fused attention path named `name` (attention_path_name's names)
// for the scope.
class ForcedPath {
 public:
  explicit ForcedPath(const std::string& name) : before_(cuda::forced_attention_path()) {
    for (cuda::AttentionPath p : {cuda::AttentionPath::Auto, cuda::AttentionPath::Simt, cuda::AttentionPath::TensorCore,
                                  cuda::AttentionPath::Cudnn}) {
      if (name == cuda::attention_path_name(p)) cuda::force_attention_path(p);
    }
  }
  ~ForcedPath() { cuda::force_attention_path(before_); }
  ForcedPath(const ForcedPath&) = delete;
  ForcedPath& operator=(const ForcedPath&) = delete;

 private:
  cuda::AttentionPath before_;
};
#endif

Options parse(int argc, char** argv) {
  bench::Flags flags(argc, argv,
                     "attention [--tokens 16384,65536] [--width 2048] [--head-dims 64,128] [--contexts 1024,2048,4096] "
                     "[--dtypes bf16,fp16] [--steps N] [--warmup N] [--device cpu|cuda] "
                     "[--path auto,tensor_core,cudnn,simt]");
  Options o;
  o.device = flags.device();
  o.tokens = flags.counts("--tokens", {16384, 65536}, int64_t(1) << 30);
  o.width = flags.count("--width", o.width, 1 << 20);
  o.head_dims = flags.counts("--head-dims", {64, 128}, 1 << 12);
  o.contexts = flags.counts("--contexts", {1024, 2048, 4096}, 1 << 24);
  o.dtypes = flags.list("--dtypes", {"bf16", "fp16"}, {"bf16", "fp16"});
  o.steps = int(flags.count("--steps", o.steps, 100000));
  o.warmup = int(flags.count("--warmup", o.warmup, 100000));
  o.paths = flags.list("--path", {"auto"}, {"auto", "tensor_core", "cudnn", "simt"});
  if (o.device.type != DeviceType::CUDA && o.paths != std::vector<std::string>{"auto"}) {
    flags.fail("--path chooses among the CUDA kernels; on the CPU leave it out");
  }
  for (const int64_t d : o.head_dims) {
    if (o.width % d != 0)
      flags.fail("--width " + std::to_string(o.width) + " must be a multiple of every --head-dims, not of " +
                 std::to_string(d));
  }
  for (const int64_t n : o.tokens) {
    for (const int64_t t : o.contexts) {
      if (n % t != 0)
        flags.fail("--tokens " + std::to_string(n) + " must be a multiple of every --contexts, not of " +
                   std::to_string(t));
    }
  }
  flags.finish();
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  std::printf(
      "ember attention: causal scaled_dot_product_attention on contiguous (B, H, T, D), H D = %lld; median "
      "of %d runs after %d warm-up runs, on %s\n",
      static_cast<long long>(o.width), o.steps, o.warmup, bench::timing_description(o.device).c_str());
  std::printf("FLOPs: forward 4 B H T T D / 2 (causal), fwd+bwd 3.5x the forward\n\n");
  std::printf("| system | dtype | D | T | B | H | fwd ms | fwd TFLOP/s | fwd+bwd ms | fwd+bwd TFLOP/s |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  std::fflush(stdout);
  bool failed = false;
  for (const std::string& name : o.dtypes) {
    const DType dtype = name == "bf16" ? DType::BFloat16 : DType::Float16;
    for (const int64_t d : o.head_dims) {
      for (const int64_t n : o.tokens) {
        for (const int64_t t : o.contexts) {
          const Shape4 s{n / t, o.width / d, t, d};
          const std::string row =
              bench::format("%s | %lld | %lld | %lld | %lld", name.c_str(), static_cast<long long>(d),
                            static_cast<long long>(t), static_cast<long long>(s.B), static_cast<long long>(s.H));
          for (const std::string& path : o.paths) {
            const std::string system = path == "auto" ? "ember" : "ember " + path;
            const std::string cells = bench::cells_or_error(system + " | " + row, 3, failed, [&] {
#if EMBER_WITH_CUDA
              const ForcedPath forced(path);
#endif
              const auto [fwd, both] = measure(o, s, dtype);
              const double flops = forward_flops(s);
              return bench::format(" | %.3f | %.1f | %.3f | %.1f", fwd, flops / (fwd * 1e-3) / 1e12, both,
                                   3.5 * flops / (both * 1e-3) / 1e12);
            });
            std::printf("| %s | %s%s |\n", system.c_str(), row.c_str(), cells.c_str());
            std::fflush(stdout);
          }
        }
      }
    }
  }
  return failed ? 1 : 0;
}
