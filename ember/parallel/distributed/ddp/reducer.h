// Reducer: DistributedDataParallel's gradient synchronization. It packs the
// parameters' gradients into buckets, all-reduces each bucket as soon as
// its last gradient is ready during backward (overlapping communication
// with the rest of backward), and finishes the reduction when backward
// ends. DistributedDataParallel (ember/parallel/distributed/ddp/distributed_data_parallel.h)
// drives it; it is public for the tests and for wrappers of one's own.
//
// Contract:
// - Parameters are the floating leaves that require grad, all on one
//   device and contiguous, given with their names (for errors), in the same
//   order on every rank.
// - Buckets: parameters are taken in reverse order (the order in which
//   backward usually produces their gradients) and grouped per (dtype,
//   device); a bucket is closed once it holds at least its cap in bytes:
//   first_bucket_bytes for a dtype's first bucket (small, so that the first
//   all_reduce starts early), bucket_bytes after it. Buckets are ordered by
//   the position of their first parameter. Every rank computes the same
//   buckets. Once, after the first synchronized backward (without
//   find_unused_parameters, whose gradient order may change from one
//   iteration to the next, as in PyTorch), the buckets are rebuilt in the
//   order gradients actually arrived on rank 0, which rank 0 broadcasts at
//   the start of the next prepare (a collective: every rank does it).
// - prepare_for_backward(outputs) arms the next backward for
//   synchronization (DDP calls it after a forward with grad mode on outside
//   no_sync). The post-accumulate-grad hook of each parameter then copies
//   its gradient into its bucket slot (nothing to copy when grad() is the
//   slot already) and, when that completes bucket i and buckets before it
//   were launched, starts bucket i's communication hook, and each bucket
//   after it that is complete. Buckets are launched in index order on every
//   rank, as collectives are matched by order.
// - When backward ends (autograd::queue_callback, queued by the first hook)
//   the reducer waits for every bucket, copies the results into the
//   buckets and makes each parameter's grad() the mean over the ranks of
//   the gradients accumulated since the last synchronization.
// - gradient_as_bucket_view: grad() becomes a view of its bucket slot at
//   the first reduction, so backward accumulates straight into the bucket
//   and nothing is copied either way. A grad() that was dropped
//   (zero_grad(set_to_none)) or replaced is copied into the slot by the
//   hook, and grad() is made the slot again. Without it, gradients are
//   copied in and the results copied back.
// - A parameter that got no gradient (not used in computing the loss):
//   without find_unused_parameters, that is an ember::Error at the end of
//   backward naming the parameters and saying to pass
//   find_unused_parameters = true (the other ranks, whose buckets this rank
//   never joins, fail after the process group's timeout). With it,
//   prepare_for_backward walks the graph from the outputs (Node::next_edges
//   down to the AccumulateGrad nodes) and the parameters it does not reach
//   are marked ready at the first hook of backward; parameters it reached
//   whose gradient never came (an output not used in the loss) are marked
//   ready when backward ends. A parameter marked ready that way contributes
//   its current grad() (zeros when undefined) to the mean. A usage map (one
//   int32 per parameter: did it get a gradient since the last
//   synchronization) is all-reduced after the buckets; a parameter that no
//   rank used keeps its grad() exactly as it was (undefined stays
//   undefined). A parameter that gets a gradient after the walk called it
//   unused (used outside the module's forward) is an ember::Error naming it.
// - Backward outside prepare (after a no_sync forward, a second backward of
//   one forward) only accumulates locally; its gradients are part of the
//   next synchronized reduction (the usage map remembers them too).
// - autograd::grad() accumulates no leaf, so it fires no hook: the reducer
//   ignores it (its results are this rank's own gradients), and stays
//   armed for the backward that follows (PyTorch's DDP, too, reduces only
//   what backward accumulates into .grad).
// - Failures: an error in the reduction (a collective that failed or timed
//   out, the unused-parameter error) propagates out of backward() and makes
//   the reducer unusable: the next prepare throws, naming the first error.
//   So does a prepare after a backward that was interrupted (its walk threw)
//   after some hooks had fired.
// - One thread: the reducer is used by the thread that runs forward and
//   backward (ember's engine runs on the caller's thread).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ember/core/tensor.h"
#include "ember/parallel/distributed/coalesced.h"
#include "ember/parallel/distributed/ddp/comm_hooks.h"
#include "ember/parallel/distributed/process_group.h"

namespace ember::parallel {

// The first bucket's default cap (PyTorch's); later buckets take
// kDefaultBucketBytes (25 MiB, ember/parallel/distributed/coalesced.h).
inline constexpr int64_t kDefaultFirstBucketBytes = int64_t(1) << 20;  // 1 MiB

struct ReducerOptions {
  int64_t first_bucket_bytes = kDefaultFirstBucketBytes;
  int64_t bucket_bytes = int64_t(kDefaultBucketBytes);
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = true;
};

// The buckets of `order` (parameter indices, first to be reduced first):
// see the contract. Exposed for the tests.
std::vector<std::vector<size_t>> compute_buckets(const TensorList& params, const std::vector<size_t>& order,
                                                 int64_t first_bucket_bytes, int64_t bucket_bytes);

class Reducer : public std::enable_shared_from_this<Reducer> {
 public:
  // Registers the parameters' hooks (which hold the reducer weakly: once it
  // is gone they do nothing).
  static std::shared_ptr<Reducer> create(TensorList params, std::vector<std::string> names,
                                         std::shared_ptr<ProcessGroup> group, ReducerOptions options = {});
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Before a forward whose backward is to be synchronized: checks that the
  // previous reduction finished and rebuilds the buckets when due.
  void prepare_for_forward();
  // After that forward: arms the next backward (see the contract).
  void prepare_for_backward(const TensorList& outputs);

  // Replaces allreduce_hook; only before the first synchronized backward.
  void register_comm_hook(CommHook hook);

  // The parameter indices of each bucket, in bucket order.
  std::vector<std::vector<size_t>> bucket_indices() const;
  bool buckets_rebuilt() const { return rebuilt_; }
  // The flat buffer of bucket i (for tests: grad() views share its storage).
  const Tensor& bucket_buffer(size_t i) const { return buckets_.at(i).buffer; }
  const TensorList& parameters() const { return params_; }
  const std::vector<std::string>& parameter_names() const { return names_; }

 private:
  struct Bucket {
    std::vector<size_t> params;    // parameter indices, in the buffer's order
    std::vector<int64_t> offsets;  // where each one's slot starts
    Tensor buffer;                 // (total numel,) of the bucket's dtype on its device
    TensorList views;              // each slot, shaped like its parameter
    size_t pending = 0;            // parameters not ready yet in this backward
    std::optional<BucketFuture> future;
  };
  struct Slot {
    size_t bucket = 0;
    size_t index = 0;  // within the bucket
  };

  Reducer(TensorList params, std::vector<std::string> names, std::shared_ptr<ProcessGroup> group,
          ReducerOptions options);
  void build_buckets(const std::vector<size_t>& order);
  void on_gradient(size_t index);
  void mark_ready(size_t index, bool locally_used);
  void launch_ready_buckets();
  void finalize();
  void finalize_unchecked();
  void check_usable(const char* when) const;
  std::vector<std::string> names_of(const std::vector<size_t>& indices) const;

  TensorList params_;
  std::vector<std::string> names_;
  std::shared_ptr<ProcessGroup> group_;
  ReducerOptions options_;
  CommHook hook_;
  std::vector<Bucket> buckets_;
  std::vector<Slot> slots_;  // per parameter

  // Per synchronized backward.
  bool expect_hooks_ = false;   // armed by prepare_for_backward
  bool started_ = false;        // a hook fired (the callback is queued)
  bool marked_unused_ = false;  // the walk's unused parameters were marked ready
  size_t next_bucket_ = 0;      // the next bucket to launch
  std::vector<bool> ready_;
  std::vector<size_t> unused_;      // found by the walk
  std::vector<Tensor> kept_grads_;  // grads of locally unused parameters, restored if no rank used them
  // Since the last synchronization: which parameters got a gradient.
  std::vector<int32_t> used_;

  // Bucket rebuilding.
  bool rebuilt_ = false;
  bool synchronized_once_ = false;
  std::vector<size_t> arrival_;  // the first synchronized backward's order

  std::string broken_;  // why the reducer is unusable; empty while usable
};

}  // namespace ember::parallel
