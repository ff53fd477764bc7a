// Communication hooks of DistributedDataParallel: how one bucket of
// gradients is reduced over the ranks, as torch.distributed's DDP comm hooks.
//
//   ddp->register_comm_hook(parallel::fp16_compress_hook);   // half the traffic, float16 sums
//   ddp->register_comm_hook([](ProcessGroup& group, GradBucket& bucket) {   // a hook of one's own
//     Tensor b = bucket.buffer();
//     b.div_(group.size());                                   // the result must be the mean
//     return BucketFuture(group.all_reduce(b), b);
//   });
//
// Contract:
// - The reducer (ember/parallel/distributed/ddp/reducer.h) calls the hook once per bucket per
//   synchronized backward, for buckets 0, 1, 2, ... in that order on every
//   rank, during backward: from the post-accumulate-grad hook that makes the
//   bucket complete. A hook must issue the same collectives on every rank
//   (process-group rule) and return at once with a BucketFuture; it may
//   modify bucket.buffer() in place.
// - bucket.buffer() is a flat 1-D contiguous tensor of this rank's
//   gradients of the bucket's parameters, one after the other
//   (parameters(), offsets(); gradients() gives them as views shaped and
//   strided like the parameters). It holds one dtype and lives on one device.
// - BucketFuture::wait(), called by the reducer when backward ends (bucket
//   by bucket, in order), returns the bucket's reduced gradients: the mean
//   over the ranks, flat, with the buffer's size (the buffer itself, or a
//   tensor the reducer then copies into it, casting its dtype). A hook that
//   sums must divide by the world size itself. On a GPU backend wait()
//   orders the current stream after the collective, as Work::wait() does,
//   and the work done after it (decompression) is queued on that stream.
// - allreduce_hook is the default: an all_reduce with ReduceOp::Avg in
//   place. fp16_compress_hook / bf16_compress_hook divide by the world size
//   in float32, cast to float16 / bfloat16, all_reduce (sum) that, and cast
//   back into the buffer: half the bytes on the wire for float32
//   gradients, at the precision of the 16-bit type (float16 overflows past
//   65504 to inf, which GradScaler then skips; bfloat16 keeps float32's
//   range with 8 bits of mantissa). A bucket already in that dtype (or in
//   float64, for which compression would lose too much) is passed to
//   allreduce_hook unchanged.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "ember/core/tensor.h"
#include "ember/parallel/distributed/process_group.h"
#include "ember/parallel/distributed/work.h"

namespace ember::parallel {

// The result of a communication hook, available after wait().
class BucketFuture {
 public:
  // A result that is final already (no communication, or done synchronously).
  explicit BucketFuture(Tensor value);
  // value once work has completed.
  BucketFuture(std::shared_ptr<Work> work, Tensor value);
  // then() once work has completed (to decompress, or to combine several
  // collectives' results).
  BucketFuture(std::shared_ptr<Work> work, std::function<Tensor()> then);

  // Waits for the work (rethrowing its failure) and returns the result.
  Tensor wait();

 private:
  std::shared_ptr<Work> work_;
  std::function<Tensor()> then_;
  Tensor value_;
};

// One bucket as a hook sees it.
class GradBucket {
 public:
  GradBucket(size_t index, size_t num_buckets, Tensor buffer, TensorList parameters, std::vector<int64_t> offsets,
             TensorList gradients);

  size_t index() const { return index_; }
  bool is_last() const { return index_ + 1 == num_buckets_; }
  // This rank's gradients, flat (see the contract).
  const Tensor& buffer() const { return buffer_; }
  // The bucket's parameters, in the buffer's order, and where each one's
  // gradient starts in the buffer (in elements).
  const TensorList& parameters() const { return parameters_; }
  const std::vector<int64_t>& offsets() const { return offsets_; }
  // The gradients as views of buffer() shaped and laid out like the
  // parameters (a channels-last weight's gradient is a channels-last view).
  // The list lives as long as the bucket, the hook's call: a continuation
  // that runs later keeps a copy of it.
  const TensorList& gradients() const { return gradients_; }

 private:
  size_t index_;
  size_t num_buckets_;
  Tensor buffer_;
  TensorList parameters_;
  std::vector<int64_t> offsets_;
  TensorList gradients_;
};

using CommHook = std::function<BucketFuture(ProcessGroup& group, GradBucket& bucket)>;

BucketFuture allreduce_hook(ProcessGroup& group, GradBucket& bucket);
BucketFuture fp16_compress_hook(ProcessGroup& group, GradBucket& bucket);
BucketFuture bf16_compress_hook(ProcessGroup& group, GradBucket& bucket);

}  // namespace ember::parallel
