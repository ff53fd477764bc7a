// Replicas of a module on several devices: ReplicaSet, which DataParallel
// keeps between forwards, and replicate(), PyTorch's
// torch.nn.parallel.replicate.
//
// A ReplicaSet is made for a module (the original) and a device list whose
// first entry is the original's device (CUDA devices, or the CPU listed
// several times). update(n) returns n modules for the first n devices: the
// original itself for devices[0] (PyTorch's broadcast also hands
// device_ids[0] the original tensors; ember skips copying the module tree
// too), then one replica per other device holding the original's current
// parameters and buffers.
//
// Contract:
// - Replicas are clones (Module::clone, so every class in the tree must
//   implement it), made at the first update and kept. A change in the
//   original's list of parameters and buffers, their shapes, dtypes or
//   requires_grad flags rebuilds them. Their training flags follow the
//   original's, module by module, at every update.
// - Every parameter and buffer of the original must be on devices[0]; else
//   an ember::Error in PyTorch's words, naming the tensor and the fix.
// - With grad mode on, an update records one BroadcastBackward node: the
//   replicas' parameters that require grad become its outputs (non-leaves),
//   the original's its inputs. Its backward sums each parameter's gradients
//   over the replicas onto devices[0] with one reduction per bucket
//   (reduce_add_coalesced), and the engine adds replica 0's gradient, which
//   reaches the original directly, before accumulating: the original's
//   grad() is the sum over all replicas, so an optimizer built on the
//   original just works. With grad mode off the replicas' parameters carry
//   no history.
// - Buffers are copied, never tied: replica 0's updates (BatchNorm's running
//   statistics) are the original's own and are kept; the other replicas'
//   are overwritten by the next update (PyTorch's rule). Each buffer gets
//   memory of its own, so a buffer written in place during forward never
//   bumps the version counter of another tensor saved for backward.
// - ReplicationMode::Classic broadcasts every parameter and buffer at every
//   update into fresh memory (parameters bucket by bucket) and points the
//   replicas' tensors at it. A replica whose tensors are still held by an
//   earlier forward's graph (its backward has not run yet) is replaced by a
//   fresh clone instead of being repointed, so that graph keeps its values.
// - ReplicationMode::Fast keeps each replica's tensors in flat buckets of
//   its own and copies a bucket only when one of its originals changed since
//   that replica received it (new storage, or a bumped version counter: an
//   optimizer step, load_state_dict, an in-place write) or the replica's
//   copy was written to. A graph made before an optimizer step then fails in
//   backward with the in-place modification error, as it does without
//   DataParallel. Both modes give the replicas the same values and record
//   the same node, so they compute the same numbers.
// - The copies go through the BucketTransport (coalesced.h): device-generic
//   copies now, an NCCL broadcast per bucket later.
#pragma once

#include <memory>
#include <vector>

#include "ember/nn/module.h"
#include "ember/parallel/distributed/coalesced.h"

namespace ember::parallel {

enum class ReplicationMode { Classic, Fast };

// Throws PyTorch's error unless every parameter and buffer of module is on
// `device`, naming the first one that is not and the fix.
void check_module_device(const nn::Module& module, Device device);

class ReplicaSet {
 public:
  ReplicaSet(std::shared_ptr<nn::Module> original, std::vector<Device> devices,
             ReplicationMode mode = ReplicationMode::Classic, size_t bucket_bytes = kDefaultBucketBytes,
             std::shared_ptr<BucketTransport> transport = nullptr);
  ~ReplicaSet();
  ReplicaSet(const ReplicaSet&) = delete;
  ReplicaSet& operator=(const ReplicaSet&) = delete;

  // The original and n - 1 up-to-date replicas, for devices[0..n).
  std::vector<std::shared_ptr<nn::Module>> update(size_t n);

  const std::vector<Device>& devices() const { return devices_; }
  ReplicationMode mode() const { return mode_; }

 private:
  struct Layout;
  struct Replica;

  void rebuild_layout(const TensorList& originals, const std::vector<std::string>& names, size_t num_params);
  std::unique_ptr<Replica> build(Device device) const;
  void broadcast_all(const TensorList& originals, size_t n);
  void broadcast_changed(const TensorList& originals, size_t n);
  void record_history(const TensorList& originals, size_t n);

  std::shared_ptr<nn::Module> original_;
  std::vector<Device> devices_;
  ReplicationMode mode_;
  size_t bucket_bytes_;
  std::shared_ptr<BucketTransport> transport_;
  std::unique_ptr<Layout> layout_;
  std::vector<std::unique_ptr<Replica>> replicas_;  // [0] stays empty: the original
};

// torch.nn.parallel.replicate: the original and one classic replica per
// other device (see ReplicaSet::update).
std::vector<std::shared_ptr<nn::Module>> replicate(const std::shared_ptr<nn::Module>& module,
                                                   const std::vector<Device>& devices,
                                                   size_t bucket_bytes = kDefaultBucketBytes);

}  // namespace ember::parallel
