// Host -> device batch copies on a side stream, handed to the consumer's
// stream with an Event and record_stream.
#include "ember/data/device_transfer.h"

#include <utility>

#include "ember/core/cuda/device.h"
#include "ember/core/error.h"
#if EMBER_WITH_CUDA
#include "ember/core/cuda/caching_allocator.h"
#include "ember/core/cuda/event.h"
#include "ember/core/grad_mode.h"
#include "ember/core/ops.h"
#endif

namespace ember::data {

BatchTransfer::BatchTransfer(Device device) : device_(device) {
  if (device.is_cpu()) return;
  try {
    cuda::check_device(device.index);
  } catch (const Error& e) {
    throw Error("DataLoader: cannot deliver batches on " + device.str() + ": " + e.what());
  }
#if EMBER_WITH_CUDA
  stream_ = cuda::stream_from_pool(device.index);
#endif
}

InFlightBatch BatchTransfer::start(Batch host) const {
#if EMBER_WITH_CUDA
  if (stream_) {
    cuda::StreamGuard on_side_stream(*stream_);
    NoGradGuard no_grad;
    InFlightBatch out;
    out.batch.input = empty(host.input.shape(), host.input.dtype(), device_).copy_(host.input);
    out.batch.target = empty(host.target.shape(), host.target.dtype(), device_).copy_(host.target);
    out.copied = std::make_shared<cuda::Event>();
    out.copied->record(*stream_);
    return out;
  }
#endif
  return {std::move(host), nullptr};
}

Batch BatchTransfer::finish(InFlightBatch batch) const {
#if EMBER_WITH_CUDA
  if (batch.copied != nullptr) {
    const cuda::Stream consumer = cuda::current_stream(device_.index);
    batch.copied->wait(consumer);
    for (const Tensor* t : {&batch.batch.input, &batch.batch.target}) cuda::record_stream(*t->storage(), consumer);
  }
#endif
  return std::move(batch.batch);
}

}  // namespace ember::data
