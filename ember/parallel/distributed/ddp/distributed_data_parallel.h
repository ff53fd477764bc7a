// DistributedDataParallel: data-parallel training over the ranks of a
// process group, as torch.nn.parallel.DistributedDataParallel. Each rank
// runs the same model on its own share of the data; backward averages the
// gradients over the ranks, so every rank takes the same optimizer step.
//
//   parallel::init_process_group("gloo");                      // under ember-run
//   auto ddp = std::make_shared<parallel::DistributedDataParallel>(model);   // the default group
//   optim::SGD opt(ddp->parameters(), {.lr = 0.1});
//   for (auto& batch : loader) {                                // a DistributedSampler's share
//     opt.zero_grad();
//     nn::functional::cross_entropy(ddp->forward(batch.input), batch.target).backward();
//     opt.step();                                               // grads are the mean over the ranks
//   }
//   { auto guard = ddp->no_sync(); loss_of(ddp, micro).backward(); }   // accumulate locally
//
// Contract:
// - Construction (a collective: every rank of the group constructs its DDP
//   in the same order) checks that every rank's module has the same
//   parameters and buffers (names, shapes, dtypes, requires_grad); the
//   first difference is an ember::Error on every rank naming the rank, the
//   tensor and both descriptions. Then rank 0's parameters and buffers are
//   broadcast to every rank (one collective per dtype), so every replica
//   starts equal. The module's parameters and buffers must be on one device
//   and its parameters contiguous; at least one must require grad.
// - The module is registered as the child "module": ddp->parameters() are
//   the module's, and state_dict() keys read "module.fc.weight" as in
//   PyTorch (save ddp->module()->state_dict() for checkpoints that load
//   into a plain model).
// - forward(input) runs the module (a UnaryModule; forward_with runs any
//   other forward: a function calling the module, whose outputs DDP
//   inspects). Around it: with broadcast_buffers (default) and in training
//   mode, rank 0's buffers (BatchNorm's running statistics) are broadcast
//   first, so every rank normalizes alike in eval; with grad mode on and
//   outside no_sync, the reducer checks that the previous reduction
//   finished, rebuilds its buckets when due, and afterwards arms the
//   backward for synchronization (see ember/parallel/distributed/ddp/reducer.h for buckets,
//   gradient views, unused parameters and errors). The collectives of a
//   forward are the same on every rank as long as every rank runs the same
//   sequence of forwards (mode, grad mode, no_sync).
// - The next backward of that forward's outputs leaves in each parameter's
//   grad() the mean over the ranks of the gradients accumulated since the
//   last synchronization (PyTorch's semantics: per-rank losses averaged).
//   Gradients are views of the reducer's buckets (gradient_as_bucket_view).
// - no_sync() returns a guard; forwards inside it are not synchronized:
//   their backwards only accumulate into grad(), and the first synchronized
//   backward after it averages the sum (gradient accumulation).
// - register_comm_hook replaces the bucket all_reduce (ember/parallel/distributed/ddp/comm_hooks.h),
//   before the first backward.
// - Mixed precision: averaged gradients are the same on every rank, so
//   amp::GradScaler finds the same inf/NaN on every rank and every rank
//   skips the same steps (an inf on one rank is inf in the mean). Activation
//   checkpointing (ember/parallel/checkpoint/checkpoint.h) works inside the module: each
//   parameter's gradient still arrives once per backward.
// - autograd::grad() through a DDP module gives this rank's own gradients
//   and synchronizes nothing (see ember/parallel/distributed/ddp/reducer.h).
// - The module must not be converted (to(device), to(dtype)) after
//   wrapping. clone() is an ember::Error (clone the module, then wrap the copy).
#pragma once

#include <concepts>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "ember/nn/module.h"
#include "ember/parallel/distributed/ddp/comm_hooks.h"
#include "ember/parallel/distributed/ddp/reducer.h"
#include "ember/parallel/distributed/process_group.h"

namespace ember::parallel {

struct DistributedDataParallelOptions {
  bool broadcast_buffers = true;
  int64_t bucket_cap_bytes = int64_t(kDefaultBucketBytes);    // 25 MiB
  int64_t first_bucket_cap_bytes = kDefaultFirstBucketBytes;  // 1 MiB
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = true;
};

class DistributedDataParallel : public nn::UnaryModule {
 public:
  // group null: the default group (parallel::init_process_group).
  explicit DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<ProcessGroup> group = nullptr,
                                   DistributedDataParallelOptions options = {});

  // The module's forward; the module must be a UnaryModule.
  Tensor forward(const Tensor& input) override;
  // fn() calls the module's forward (any signature) and returns a Tensor or
  // a TensorList: its outputs.
  template <typename Fn>
  requires std::invocable<Fn&>
  auto forward_with(Fn fn) {
    using R = std::remove_cvref_t<std::invoke_result_t<Fn&>>;
    static_assert(std::is_same_v<R, Tensor> || std::is_same_v<R, TensorList>,
                  "DistributedDataParallel::forward_with: the function must return a Tensor or a TensorList");
    const bool sync = pre_forward();
    R out = fn();
    if constexpr (std::is_same_v<R, Tensor>) post_forward(sync, TensorList{out});
    else post_forward(sync, out);
    return out;
  }

  // The guard of no_sync(): while it lives, forwards are not synchronized.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.require_sync_) {
      ddp.require_sync_ = false;
    }
    ~NoSyncGuard() { ddp_.require_sync_ = previous_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  void register_comm_hook(CommHook hook);

  const std::shared_ptr<nn::Module>& module() const { return module_; }
  ProcessGroup& process_group() const { return *group_; }
  const DistributedDataParallelOptions& options() const { return options_; }
  // For tests and tuning: the buckets (as parameter names of the module),
  // and the reducer itself.
  std::vector<std::vector<std::string>> bucket_parameter_names() const;
  Reducer& reducer() const { return *reducer_; }

  std::string name() const override { return "DistributedDataParallel"; }
  std::shared_ptr<Module> clone() const override;

 private:
  // Returns whether this forward is synchronized.
  bool pre_forward();
  void post_forward(bool sync, const TensorList& outputs);

  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<ProcessGroup> group_;
  DistributedDataParallelOptions options_;
  std::shared_ptr<Reducer> reducer_;
  TensorList buffers_;
  bool require_sync_ = true;
};

}  // namespace ember::parallel
