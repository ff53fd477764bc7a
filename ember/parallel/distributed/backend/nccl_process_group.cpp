// The nccl backend (ember/parallel/distributed/backend/nccl_process_group.h): the
// group's construction, its checks of a collective's tensors, and launch(),
// which queues a collective for the worker (nccl_worker.h).
//
// Why NCCL_NVLS_ENABLE=0 unless the user set it: NVLink SHARP (NVLS) builds
// its buffers from CUDA multicast objects (cuMulticastCreate), and on the
// shared machines ember runs on a multicast setup gone wrong can put every
// GPU of the host out of service, for all of its users. NVLS only speeds up
// large all-reduces on NVSwitch systems; whoever wants it sets the variable.
#include "ember/parallel/distributed/backend/nccl_process_group.h"

#include <nccl.h>

#include <string>
#include <thread>
#include <utility>

#include "ember/core/cuda/device.h"
#include "ember/core/cuda/stream.h"
#include "ember/core/error.h"
#include "ember/core/ops.h"
#include "ember/core/ops/op_utils.h"
#include "ember/parallel/distributed/backend/nccl_common.h"
#include "ember/parallel/distributed/backend/nccl_worker.h"

static_assert(NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0),
              "ember's nccl backend needs NCCL 2.18 or newer (non-blocking communicators, ncclCommFinalize, "
              "ncclConfig_t::commName)");

namespace ember::parallel {

namespace {

using ember::detail::describe;

// The group's device: the option's, or the caller's current one, checked.
int checked_device(const ProcessGroupOptions& options, int rank, int size) {
  default_nccl_environment();
  const std::string who = "nccl process group (rank " + std::to_string(rank) + " of " + std::to_string(size) + ")";
  EMBER_CHECK(options.nccl_device >= -1, who << ": ProcessGroupOptions::nccl_device is " << options.nccl_device
                                             << "; give a CUDA device id, or -1 for the current device");
  if (cuda::device_count() == 0) {
    std::string why;
    try {
      cuda::check_device(0);
    } catch (const Error& e) {
      why = e.what();
    }
    EMBER_FAIL(who << ": the nccl backend needs a CUDA device for each rank, and this process sees none (" << why
                   << "). For CPU tensors use the gloo backend");
  }
  const int device = options.nccl_device == -1 ? cuda::current_device() : options.nccl_device;
  try {
    cuda::check_device(device);
  } catch (const Error& e) {
    EMBER_FAIL(who << ": ProcessGroupOptions::nccl_device " << device
                   << " is not a device of this process: " << e.what());
  }
  return device;
}

}  // namespace

NcclProcessGroup::Impl::~Impl() { comm->close(group != nullptr ? group->timeout() : std::chrono::milliseconds(0)); }

std::string NcclProcessGroup::Impl::where() const {
  return "nccl group '" + group->name() + "', rank " + std::to_string(group->rank()) + " of " +
         std::to_string(group->size()) + " on cuda:" + std::to_string(device);
}

void NcclProcessGroup::Impl::connect() {
  comm->comm = detail::connect_communicator(*group->store(), group->rank(), group->size(), device, group->name(),
                                            group->timeout(), where());
}

NcclProcessGroup::NcclProcessGroup(const std::shared_ptr<Store>& store, int rank, int size,
                                   const ProcessGroupOptions& options)
    : NcclProcessGroup(store, rank, size, options, checked_device(options, rank, size)) {}

NcclProcessGroup::NcclProcessGroup(const std::shared_ptr<Store>& store, int rank, int size,
                                   const ProcessGroupOptions& options, int device)
    : ProcessGroup(store, rank, size, options), impl_(std::make_unique<Impl>()) {
  impl_->group = this;
  impl_->device = device;
  impl_->blocking_wait = options.nccl_blocking_wait;
  impl_->stream = cuda::stream_from_pool(device, /*high_priority=*/true);
  {
    cuda::StreamGuard guard(impl_->stream);
    impl_->barrier_buffer = zeros({1}, DType::Float32, cuda_device(device));
  }
  impl_->connect();
  impl_->worker = std::thread([impl = impl_.get()] { impl->serve(); });
}

NcclProcessGroup::~NcclProcessGroup() {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->wake.notify_all();
  impl_->worker.join();
  // ~Impl closes the communicator.
}

int NcclProcessGroup::device() const { return impl_->device; }

void NcclProcessGroup::check_tensors(const Collective& c) const {
  const Device want = cuda_device(impl_->device);
  auto name = [&](bool per_rank, size_t i) {
    switch (c.kind) {
      case CollectiveKind::AllGather: return per_rank ? "outputs[" + std::to_string(i) + "]" : std::string("the input");
      case CollectiveKind::ReduceScatter:
        return per_rank ? "inputs[" + std::to_string(i) + "]" : std::string("the output");
      default: return "tensors[" + std::to_string(i) + "]";
    }
  };
  for (bool per_rank : {false, true}) {
    const TensorList& list = per_rank ? c.per_rank : c.tensors;
    for (size_t i = 0; i < list.size(); ++i) {
      const Tensor& t = list[i];
      if (t.device() == want) continue;
      if (t.device().is_cpu()) {
        EMBER_FAIL("nccl " << c.signature() << ": the nccl backend works on CUDA tensors on this group's device "
                           << want.str() << ", but " << name(per_rank, i) << " is " << describe(t)
                           << "; move it there with t.to(cuda_device(" << impl_->device
                           << ")) (and the result back), or use a gloo group for CPU tensors");
      }
      EMBER_FAIL("nccl " << c.signature() << ": " << name(per_rank, i) << " is " << describe(t) << ", but this rank's "
                         << "group works on " << want.str() << " (ProcessGroupOptions::nccl_device, else the current "
                         << "device when the group was made); move the tensor there, or make the group on its device");
    }
  }
}

std::shared_ptr<Work> NcclProcessGroup::launch(Collective c) {
  const bool blocking = impl_->blocking_wait || c.kind == CollectiveKind::Barrier;
  auto work = std::make_shared<detail::NcclWork>(collective_name(c.kind), c.seq, impl_->comm, impl_->device, blocking);
  work->caller_ready.record(cuda::current_stream(impl_->device));
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    Impl::Item& item = impl_->queue.emplace_back();
    item.c = std::move(c);
    item.work = work;
  }
  impl_->wake.notify_one();
  return work;
}

}  // namespace ember::parallel
