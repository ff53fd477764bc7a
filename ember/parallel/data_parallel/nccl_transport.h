// DataParallel's NCCL transport: the BucketTransport (ember/parallel/distributed/coalesced.h)
// that moves each bucket between the GPUs of one process with one NCCL
// collective (ncclBroadcast to copy parameters to the replicas, ncclReduce
// to sum their gradients) instead of peer copies and adds.
//
// Contract:
// - nccl_transport(devices) creates one communicator per device (a clique
//   of ncclCommInitAll over their ids) for CUDA devices with distinct ids;
//   anything else is an ember::Error naming the devices.
// - broadcast(source, destinations) is one ncclBroadcast per device of the
//   transport, in one NCCL group, when the source and destinations are
//   dense, of the source's dtype (any but bool) and numel, on distinct
//   devices of the transport that together with the source's device are
//   all of them (DataParallel's fast mode leaves out the source's device:
//   it holds the originals). Otherwise (a batch that uses fewer devices,
//   say) it does what copy_transport() does. Likewise reduce_sum(sources,
//   destination) is one ncclReduce with the destination's device as root;
//   the root adds zeros when it has no source; the result is new memory.
// - Each collective runs on the current stream of each device, so it is
//   ordered after the work queued there before the call and before the
//   work queued after it; the host does not wait.
// - Not differentiable: reduce_sum in grad mode with a source that requires
//   grad (create_graph through DataParallel's fast mode) takes the copy
//   path, which records autograd.
// - One caller at a time (DataParallel runs one forward and backward at a
//   time).
// Only in builds with CUDA (the header has no CUDA type; the .cpp is
// excluded from CPU-only builds, where nothing calls it).
#pragma once

#include <memory>
#include <vector>

#include "ember/parallel/distributed/coalesced.h"

namespace ember::parallel {

std::shared_ptr<BucketTransport> nccl_transport(const std::vector<Device>& devices);

}  // namespace ember::parallel
