// Moving collated host batches to the DataLoader's device, overlapped with
// the consumer's work.
//
// Contract:
// - For a CPU device, start() and finish() hand the batch through untouched.
// - For a CUDA device, start() runs on the producer (a loader worker, or the
//   consumer itself with no workers): on a side stream taken once from
//   cuda::stream_from_pool, it allocates the device tensors and enqueues the
//   host -> device copies, then records an Event. From pinned memory the
//   copies are asynchronous, so start() returns before the bytes have moved.
//   finish() runs on the consumer thread: it makes the consumer's current
//   stream of that device wait for the Event (on the GPU; the host does not
//   block) and record_stream()s the device tensors on that stream, so their
//   memory is not reused before the consumer's work on them has finished.
//   The copy of batch k + 1 thus overlaps the consumer's kernels on batch k.
// - Making a BatchTransfer for a CUDA device that is not visible (or in an
//   ember built without CUDA) is an ember::Error naming the device.
#pragma once

#include <memory>
#include <optional>

#include "ember/core/cuda/stream.h"
#include "ember/core/device.h"
#include "ember/data/dataset.h"

namespace ember::cuda {
class Event;
}

namespace ember::data {

// A batch whose copy to the device may still be in flight.
struct InFlightBatch {
  Batch batch;
  std::shared_ptr<cuda::Event> copied;  // null when nothing was copied
};

class BatchTransfer {
 public:
  explicit BatchTransfer(Device device);

  Device device() const { return device_; }
  InFlightBatch start(Batch host) const;
  Batch finish(InFlightBatch batch) const;

 private:
  Device device_;
  std::optional<cuda::Stream> stream_;  // the side stream (CUDA devices only)
};

}  // namespace ember::data
