// Coalesced broadcast and reduction of tensor lists across devices: how
// DataParallel copies parameters to its replicas and sums their gradients.
//
// Tensors travel in buckets: runs of consecutive tensors of one dtype, each
// bucket closed once it holds bucket_bytes (a larger tensor gets a bucket of
// its own). A bucket crosses devices as one flat tensor, so a model of many
// small tensors costs a few copies, not one per tensor.
//
// The flat buffers move through a BucketTransport. copy_transport() is
// device-generic: Tensor::to / copy_ (peer copies between GPUs, host copies
// between CPU "devices") and out-of-place adds, so it runs with CPU replicas
// in CI and its reduction is differentiable (create_graph works). A
// collective transport (NCCL's ncclBroadcast / ncclReduce on the GPUs of one
// process) implements the same two calls, one collective per bucket.
//
// Contract:
// - assign_buckets(tensors, bucket_bytes) keeps the tensors' order inside
//   each bucket and lists every tensor in exactly one bucket.
// - broadcast_coalesced(tensors, devices, buckets) returns copies[k][i] =
//   tensors[i] on devices[k], in fresh memory (even on the source device);
//   the copies of a bucket are views of one flat tensor per device. No
//   autograd is recorded.
// - reduce_add_coalesced(grads, destination, buckets) returns, for each
//   tensor i, the sum over replicas r of grads[r][i] on destination, where an
//   undefined entry counts as zero, and the result is undefined when no
//   replica has a defined entry (an unused parameter keeps grad() None, as
//   without DataParallel). It records autograd when grad mode is on.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "ember/core/tensor.h"

namespace ember::parallel {

// DistributedDataParallel's default bucket size in PyTorch.
inline constexpr size_t kDefaultBucketBytes = size_t(25) << 20;

struct Bucket {
  DType dtype = kDefaultFloat;
  std::vector<size_t> members;  // indices into the bucketed list
  std::vector<Shape> shapes;    // of each member
  int64_t numel = 0;            // of the flat tensor
};

std::vector<Bucket> assign_buckets(const TensorList& tensors, size_t bucket_bytes = kDefaultBucketBytes);

class BucketTransport {
 public:
  virtual ~BucketTransport() = default;
  // Copies `source` into every destination (equal numel and dtype, any
  // devices), in place.
  virtual void broadcast(const Tensor& source, const TensorList& destinations) = 0;
  // The elementwise sum of `sources` (one flat bucket per replica, any
  // devices) as a new tensor on `destination`.
  virtual Tensor reduce_sum(const TensorList& sources, Device destination) = 0;
};

// The device-generic transport (see above); one shared instance.
std::shared_ptr<BucketTransport> copy_transport();

// The members of `bucket` taken from `tensors` (all on `device`), flattened
// into one contiguous 1-D tensor; undefined members are zeros. A bucket of
// one member gives a view of it. Differentiable.
Tensor flatten_bucket(const TensorList& tensors, const Bucket& bucket, Device device);
// Views of `flat` with the bucket's member shapes, in member order.
TensorList unflatten_bucket(const Tensor& flat, const Bucket& bucket);

std::vector<TensorList> broadcast_coalesced(const TensorList& tensors, const std::vector<Device>& devices,
                                            const std::vector<Bucket>& buckets, BucketTransport& transport);
TensorList reduce_add_coalesced(const std::vector<TensorList>& grads, Device destination,
                                const std::vector<Bucket>& buckets, BucketTransport& transport);

}  // namespace ember::parallel
