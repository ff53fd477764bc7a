// ProcessGroup: the ranks of a job that run collectives together, and the
// collectives. A backend (gloo for CPU tensors, ember/parallel/distributed/backend/gloo_process_group.h;
// nccl for CUDA tensors, ember/parallel/distributed/backend/nccl_process_group.h) derives from it;
// callers see only this interface.
//
//   auto group = parallel::new_group("gloo", store, rank, world_size);   // ember/parallel/distributed/init.h
//   group->all_reduce(grad, ReduceOp::Avg)->wait();
//   auto work = group->broadcast(weights, /*root=*/0);                  // asynchronous
//   work->wait();
//
// Contract:
// - Every rank of the group calls the same collectives in the same order,
//   with tensors of the same shapes and dtypes (PyTorch's rule). Each call is
//   numbered per group (the first is #1); errors name the collective by that
//   number. EMBER_DISTRIBUTED_DEBUG=1 checks the rule before each collective
//   and reports the first rank that breaks it (ember/parallel/distributed/debug_check.h).
// - Every collective is asynchronous: it returns a Work at once (see
//   ember/parallel/distributed/work.h) and runs in issue order. The tensors must stay untouched
//   until its wait() returns. The call itself throws an ember::Error for bad
//   arguments (naming the op, the shapes, dtypes and devices), and when the
//   group is unusable after an earlier failure.
// - In place, as in PyTorch: all_reduce and broadcast overwrite their
//   tensors; all_gather writes the outputs, reduce_scatter the output. A
//   TensorList version runs one collective over all of its tensors
//   (coalesced: one number, one Work); they share a dtype and a device.
//   The version counters of written tensors are bumped when the collective
//   is issued, so autograd refuses a backward through their old values.
// - Tensors are contiguous, not bool, and on a device the backend supports
//   (gloo: the CPU; nccl: the group's GPU). ReduceOp::Avg needs a floating
//   dtype.
// - A collective that does not complete within the group's timeout fails
//   (its Work's wait() throws) with an ember::Error naming the backend, the
//   collective and its number, this rank, the ranks that did not arrive at
//   it (and what they started last), and the backend's own error. A rank
//   that exits mid-collective makes the others fail the same way, usually
//   at once (their connections to it close) and at worst after the timeout.
//   After a failure the group is unusable: later collectives fail at once,
//   naming the first failure (as NCCL after an abort).
// - Group creation is a barrier: the constructor returns when every rank
//   has joined, and throws, naming the missing ranks, after the timeout.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "ember/core/tensor.h"
#include "ember/parallel/distributed/collective.h"
#include "ember/parallel/distributed/store/store.h"
#include "ember/parallel/distributed/work.h"

namespace ember::parallel {

class CollectiveTracker;

// PyTorch's default collective timeout.
inline constexpr std::chrono::milliseconds kDefaultCollectiveTimeout = std::chrono::minutes(30);

struct ProcessGroupOptions {
  // How long a collective (and group creation) may take before it fails.
  std::chrono::milliseconds timeout = kDefaultCollectiveTimeout;
  // The EMBER_DISTRIBUTED_DEBUG check; unset: read EMBER_DISTRIBUTED_DEBUG.
  std::optional<bool> debug;
  // The group's keys live under "ember/pg/<name>/" in the store. Every rank
  // must use the same name; empty: "pg<N>", N counting the groups this
  // process has made (the same on every rank that makes groups in the same
  // order).
  std::string name;
  // gloo: the local address (host name or IP) its TCP transport listens on,
  // or the network interface (eth0) whose address to use. When both are
  // empty: GLOO_SOCKET_IFNAME if set, else this host's name.
  std::string gloo_hostname;
  std::string gloo_interface;
  // nccl: this rank's CUDA device; -1: the calling thread's current device
  // when the group is made.
  int nccl_device = -1;
  // nccl: Work::wait() blocks the host until the GPU has finished the
  // collective (or it failed), instead of only making the caller's current
  // stream wait for it; for debugging and tests (PyTorch's
  // TORCH_NCCL_BLOCKING_WAIT).
  bool nccl_blocking_wait = false;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  const std::string& name() const { return name_; }
  bool debug() const { return debug_; }
  virtual const char* backend() const = 0;  // "gloo", "nccl"
  // How many collectives this rank has issued (the number of the last one).
  uint64_t sequence_number() const;

  // Reduces each tensor over the ranks in place.
  std::shared_ptr<Work> all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::Sum);
  std::shared_ptr<Work> all_reduce(const TensorList& tensors, ReduceOp op = ReduceOp::Sum);
  // Copies root's tensors over every other rank's, in place.
  std::shared_ptr<Work> broadcast(const Tensor& tensor, int root = 0);
  std::shared_ptr<Work> broadcast(const TensorList& tensors, int root = 0);
  // outputs[r] = rank r's input; size() outputs shaped like the input.
  std::shared_ptr<Work> all_gather(const TensorList& outputs, const Tensor& input);
  // The same into one tensor: output is (size() * input.size(0), ...) or
  // (size(), ...input's shape), rank r's input in the r-th block.
  std::shared_ptr<Work> all_gather_into_tensor(const Tensor& output, const Tensor& input);
  // output = the reduction over the ranks of their inputs[rank()]; size()
  // inputs shaped like the output.
  std::shared_ptr<Work> reduce_scatter(const Tensor& output, const TensorList& inputs, ReduceOp op = ReduceOp::Sum);
  // The same from one tensor, (size() * output.size(0), ...) or (size(), ...output's shape).
  std::shared_ptr<Work> reduce_scatter_tensor(const Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::Sum);
  // Completes when every rank has called it.
  std::shared_ptr<Work> barrier();

 protected:
  // `store` is shared by the job; the group works in its own part of it.
  // Joins the group (the creation barrier) before returning.
  ProcessGroup(const std::shared_ptr<Store>& store, int rank, int size, const ProcessGroupOptions& options);

  // The backend's device and dtype rules, with errors naming c.str().
  virtual void check_tensors(const Collective& c) const = 0;
  // Starts a checked, numbered collective; runs after the ones before it.
  virtual std::shared_ptr<Work> launch(Collective c) = 0;

  // The group's part of the store (keys under "ember/pg/<name>/").
  const std::shared_ptr<Store>& store() const { return store_; }
  CollectiveTracker& tracker() const { return *tracker_; }
  // The full error for collective c that failed with `cause`: see the
  // contract above. Also marks the group unusable.
  std::string failure_message(const Collective& c, const std::string& cause);
  // Empty while usable, else why not (for backends that check before running).
  std::string broken_reason() const;

 private:
  std::shared_ptr<Work> issue(Collective c);

  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  std::string name_;
  bool debug_;
  std::shared_ptr<Store> store_;
  std::unique_ptr<CollectiveTracker> tracker_;
  std::mutex issue_mutex_;          // numbering and launching are one step: the order is the numbers' order
  mutable std::mutex state_mutex_;  // seq_ and broken_
  uint64_t seq_ = 0;
  std::string broken_;
};

}  // namespace ember::parallel
