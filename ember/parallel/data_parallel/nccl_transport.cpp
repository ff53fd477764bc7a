// NcclTransport (see ember/parallel/data_parallel/nccl_transport.h).
#include "ember/parallel/data_parallel/nccl_transport.h"

#include <nccl.h>

#include <algorithm>
#include <string>
#include <vector>

#include "ember/core/cuda/device.h"
#include "ember/core/cuda/nccl_check.h"
#include "ember/core/cuda/stream.h"
#include "ember/core/grad_mode.h"
#include "ember/core/ops.h"
#include "ember/core/ops/op_utils.h"
#include "ember/parallel/distributed/backend/nccl_common.h"

namespace ember::parallel {
namespace {

bool nccl_dtype(DType d) { return d != DType::Bool; }

class NcclTransport final : public BucketTransport {
 public:
  explicit NcclTransport(std::vector<Device> devices) : devices_(std::move(devices)) {
    std::vector<int> ids;
    for (const Device& d : devices_) {
      EMBER_CHECK(d.is_cuda(), "nccl_transport: " << d
                                                  << " is not a CUDA device; NCCL moves data between GPUs only "
                                                     "(use copy_transport() for CPU replicas)");
      EMBER_CHECK(std::find(ids.begin(), ids.end(), d.index) == ids.end(),
                  "nccl_transport: " << d << " is listed twice; give each GPU once");
      ids.push_back(d.index);
    }
    EMBER_CHECK(!ids.empty(), "nccl_transport: no devices given");
    default_nccl_environment();
    comms_.resize(ids.size());
    EMBER_NCCL_CHECK(ncclCommInitAll(comms_.data(), int(ids.size()), ids.data()));
  }

  ~NcclTransport() override {
    // A destructor cannot throw; a communicator that fails to close leaks
    // only its own resources, which the process releases at exit.
    for (ncclComm_t c : comms_) (void)ncclCommDestroy(c);
  }

  void broadcast(const Tensor& source, const TensorList& destinations) override {
    const int root = rank_of(source.device());
    const std::vector<int> ranks = ranks_of(destinations, root);
    if (ranks.empty() || !source.is_contiguous() || !nccl_dtype(source.dtype()) ||
        !all_dense(destinations, source.dtype(), source.numel())) {
      copy_transport()->broadcast(source, destinations);
      return;
    }
    // Every device of the clique takes part; the root without a destination
    // of its own broadcasts in place (NCCL allows send == recv at the root).
    std::vector<void*> recv(devices_.size(), source.data_ptr());
    for (size_t k = 0; k < destinations.size(); ++k) recv[size_t(ranks[k])] = destinations[k].data_ptr();
    EMBER_NCCL_CHECK(ncclGroupStart());
    for (size_t rank = 0; rank < devices_.size(); ++rank) {
      const void* send = int(rank) == root ? source.data_ptr() : nullptr;
      EMBER_NCCL_CHECK(ncclBroadcast(send, recv[rank], size_t(source.numel()), nccl_type(source.dtype()), root,
                                     comms_[rank], stream_of(rank)));
    }
    EMBER_NCCL_CHECK(ncclGroupEnd());
    for (const Tensor& out : destinations) out.storage()->bump_version();
  }

  Tensor reduce_sum(const TensorList& sources, Device destination) override {
    EMBER_CHECK(!sources.empty(), "reduce_sum: no tensors to reduce");
    const int root = rank_of(destination);
    const std::vector<int> ranks = ranks_of(sources, root);
    const bool records_grad = GradMode::is_enabled() && std::any_of(sources.begin(), sources.end(),
                                                                    [](const Tensor& s) { return s.requires_grad(); });
    const DType dtype = sources[0].dtype();
    if (ranks.empty() || records_grad || !nccl_dtype(dtype) || !all_dense(sources, dtype, sources[0].numel())) {
      return copy_transport()->reduce_sum(sources, destination);
    }
    // The root without a source of its own contributes zeros, in place in
    // the result (NCCL allows send == recv at the root).
    const bool root_sends = std::find(ranks.begin(), ranks.end(), root) != ranks.end();
    Tensor sum =
        root_sends ? empty(sources[0].shape(), dtype, destination) : zeros(sources[0].shape(), dtype, destination);
    std::vector<const void*> send(devices_.size(), sum.data_ptr());
    for (size_t k = 0; k < sources.size(); ++k) send[size_t(ranks[k])] = sources[k].data_ptr();
    EMBER_NCCL_CHECK(ncclGroupStart());
    for (size_t rank = 0; rank < devices_.size(); ++rank) {
      void* recv = int(rank) == root ? sum.data_ptr() : nullptr;
      EMBER_NCCL_CHECK(ncclReduce(send[rank], recv, size_t(sum.numel()), nccl_type(dtype), ncclSum, root, comms_[rank],
                                  stream_of(rank)));
    }
    EMBER_NCCL_CHECK(ncclGroupEnd());
    return sum;
  }

 private:
  // The transport rank of each tensor's device; empty unless the tensors
  // are on distinct devices of the transport that, with the root's, are
  // all of them (a collective needs the whole clique).
  std::vector<int> ranks_of(const TensorList& tensors, int root) const {
    if (root < 0) return {};
    std::vector<int> ranks;
    std::vector<bool> seen(devices_.size(), false);
    seen[size_t(root)] = true;
    size_t covered = 1;
    for (const Tensor& t : tensors) {
      const int rank = t.defined() ? rank_of(t.device()) : -1;
      if (rank < 0 || std::find(ranks.begin(), ranks.end(), rank) != ranks.end()) return {};
      if (!seen[size_t(rank)]) ++covered;
      seen[size_t(rank)] = true;
      ranks.push_back(rank);
    }
    return covered == devices_.size() ? ranks : std::vector<int>{};
  }

  int rank_of(Device d) const {
    auto it = std::find(devices_.begin(), devices_.end(), d);
    return it == devices_.end() ? -1 : int(it - devices_.begin());
  }

  static bool all_dense(const TensorList& tensors, DType dtype, int64_t numel) {
    return std::all_of(tensors.begin(), tensors.end(), [&](const Tensor& t) {
      return t.defined() && t.is_contiguous() && t.dtype() == dtype && t.numel() == numel;
    });
  }

  cudaStream_t stream_of(size_t rank) const { return cuda::current_stream(devices_[rank].index).handle(); }

  std::vector<Device> devices_;
  std::vector<ncclComm_t> comms_;
};

}  // namespace

std::shared_ptr<BucketTransport> nccl_transport(const std::vector<Device>& devices) {
  return std::make_shared<NcclTransport>(devices);
}

}  // namespace ember::parallel
