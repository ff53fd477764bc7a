// BucketFuture, GradBucket and the built-in communication hooks
// (ember/parallel/distributed/ddp/comm_hooks.h).
#include "ember/parallel/distributed/ddp/comm_hooks.h"

#include <utility>

#include "ember/core/grad_mode.h"
#include "ember/core/ops.h"

namespace ember::parallel {

BucketFuture::BucketFuture(Tensor value) : value_(std::move(value)) {}

BucketFuture::BucketFuture(std::shared_ptr<Work> work, Tensor value)
    : work_(std::move(work)), value_(std::move(value)) {}

BucketFuture::BucketFuture(std::shared_ptr<Work> work, std::function<Tensor()> then)
    : work_(std::move(work)), then_(std::move(then)) {}

Tensor BucketFuture::wait() {
  if (work_) work_->wait();
  if (then_) {
    value_ = then_();
    then_ = nullptr;
  }
  return value_;
}

GradBucket::GradBucket(size_t index, size_t num_buckets, Tensor buffer, TensorList parameters,
                       std::vector<int64_t> offsets, TensorList gradients)
    : index_(index),
      num_buckets_(num_buckets),
      buffer_(std::move(buffer)),
      parameters_(std::move(parameters)),
      offsets_(std::move(offsets)),
      gradients_(std::move(gradients)) {}

BucketFuture allreduce_hook(ProcessGroup& group, GradBucket& bucket) {
  const Tensor& buffer = bucket.buffer();
  return BucketFuture(group.all_reduce(buffer, ReduceOp::Avg), buffer);
}

namespace {

BucketFuture compress_hook(ProcessGroup& group, GradBucket& bucket, DType wire) {
  const Tensor& buffer = bucket.buffer();
  if (buffer.dtype() == wire || buffer.dtype() == DType::Float64) return allreduce_hook(group, bucket);
  Tensor compressed;
  {
    NoGradGuard no_grad;
    // Divided before the cast, so that values beyond the 16-bit range that
    // the mean brings back into it do not overflow.
    compressed = (buffer / double(group.size())).to(wire);
  }
  std::shared_ptr<Work> work = group.all_reduce(compressed, ReduceOp::Sum);
  Tensor out = buffer;
  return BucketFuture(std::move(work), [compressed, out]() mutable {
    NoGradGuard no_grad;
    out.copy_(compressed);
    return out;
  });
}

}  // namespace

BucketFuture fp16_compress_hook(ProcessGroup& group, GradBucket& bucket) {
  return compress_hook(group, bucket, DType::Float16);
}

BucketFuture bf16_compress_hook(ProcessGroup& group, GradBucket& bucket) {
  return compress_hook(group, bucket, DType::BFloat16);
}

}  // namespace ember::parallel
