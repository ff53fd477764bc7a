// What the DistributedDataParallel and SyncBatchNorm tests share: the
// backend/device configurations they run under, small models in float64,
// deterministic global batches and their per-rank shards, and comparisons.
//
// Configurations: gloo on the CPU with 2 and 4 ranks (what CI runs), and
// NCCL on cuda:0 with one rank (what the GPU machine runs). A configuration
// whose backend this build lacks (NCCL without CUDA) or whose device is not
// visible skips, saying so.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "ember/parallel/distributed/init.h"
#include "support/multiprocess.h"

namespace ember::testing {

struct DistConfig {
  std::string backend;
  Device device;
  int world_size;
};

inline void PrintTo(const DistConfig& c, std::ostream* os) {
  *os << c.backend << " on " << c.device.str() << " with " << c.world_size << " ranks";
}

inline std::string config_name(const ::testing::TestParamInfo<DistConfig>& info) {
  const DistConfig& c = info.param;
  return c.backend + "_" + (c.device.is_cuda() ? "cuda" : "cpu") + "_" + std::to_string(c.world_size) + "ranks";
}

inline std::vector<DistConfig> dist_configs() {
  return {{"gloo", kCPU, 2}, {"gloo", kCPU, 4}, {"nccl", cuda_device(0), 1}};
}

// Empty when the configuration can run here, else why not. The devices are
// counted in a forked child: the ranks are forks of this process, and CUDA
// initialized here would be unusable in them.
inline std::string why_not_runnable(const DistConfig& c) {
  if (!parallel::backend_available(c.backend)) return "this ember has no " + c.backend + " backend";
  if (c.device.is_cuda() && gpus_visible_to_forks() <= c.device.index) return "no CUDA device is visible";
  return "";
}

#define SKIP_UNLESS_RUNNABLE(config)                                    \
  do {                                                                  \
    const std::string why = ::ember::testing::why_not_runnable(config); \
    if (!why.empty()) GTEST_SKIP() << why;                              \
  } while (0)

inline std::shared_ptr<parallel::ProcessGroup> make_group(
    RankContext& ctx, const DistConfig& c, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  return parallel::new_group(c.backend, ctx.store, ctx.rank, ctx.world_size, {.timeout = timeout, .debug = false});
}

// Linear 6-12, ReLU, Linear 12-4, in float64.
inline std::shared_ptr<nn::Sequential> small_mlp(uint64_t seed, Device device) {
  manual_seed(seed);
  auto net = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(6, 12), std::make_shared<nn::ReLU>(),
                                              std::make_shared<nn::Linear>(12, 4));
  net->to(device, DType::Float64);
  return net;
}

// Conv 1-3 (3x3, pad 1, no bias), BatchNorm2d, ReLU, Flatten, Linear 75-4
// on (N, 1, 5, 5), in float64.
inline std::shared_ptr<nn::Sequential> small_cnn(uint64_t seed, Device device) {
  manual_seed(seed);
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Conv2d>(1, 3, 3, 1, 1, 1, 1, /*bias=*/false));
  net->push_back(std::make_shared<nn::BatchNorm2d>(3));
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(std::make_shared<nn::Flatten>());
  net->push_back(std::make_shared<nn::Linear>(75, 4));
  net->to(device, DType::Float64);
  return net;
}

struct Batch {
  Tensor x;  // (N, ...features) float64
  Tensor y;  // (N) int64 class labels in [0, 4)
};

// A batch every rank can make: the same seed gives the same values.
inline Batch global_batch(const Shape& features, int64_t n, uint64_t seed, Device device) {
  Generator gen(seed);
  Shape shape = features;
  shape.insert(shape.begin(), n);
  Batch b;
  b.x = randn(shape, DType::Float64, kCPU, &gen).to(device);
  b.y = randint(0, 4, {n}, DType::Int64, kCPU, &gen).to(device);
  return b;
}

// Rank r's rows of a global batch split evenly over `world` ranks.
inline Batch shard(const Batch& b, int rank, int world) {
  const int64_t per = b.x.size(0) / world;
  return {b.x.narrow(0, rank * per, per), b.y.narrow(0, rank * per, per)};
}

inline Tensor loss_of(nn::UnaryModule& model, const Batch& b) { return nn::functional::cross_entropy(model(b.x), b.y); }

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  return (a.detach().cpu().to(DType::Float64) - b.detach().cpu().to(DType::Float64)).abs().max().item<double>();
}

// The largest difference between two modules' parameters (by position).
inline double max_param_diff(const nn::Module& a, const nn::Module& b) {
  TensorList pa = a.parameters(), pb = b.parameters();
  EXPECT_EQ(pa.size(), pb.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(pa.size(), pb.size()); ++i) worst = std::max(worst, max_abs_diff(pa[i], pb[i]));
  return worst;
}

// Every rank's copy of t (all_gather), as float64 vectors on the host.
inline std::vector<std::vector<double>> gather_all(parallel::ProcessGroup& group, const Tensor& t) {
  Tensor flat = t.detach().contiguous().view({-1});
  TensorList outs;
  for (int r = 0; r < group.size(); ++r) outs.push_back(empty_like(flat));
  group.all_gather(outs, flat)->wait();
  std::vector<std::vector<double>> result;
  for (const Tensor& o : outs) result.push_back(to_vector<double>(o.cpu().to(DType::Float64)));
  return result;
}

}  // namespace ember::testing
