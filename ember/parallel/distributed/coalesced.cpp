// Buckets, the copy transport, and the coalesced broadcast and reduction.
#include "ember/parallel/distributed/coalesced.h"

#include <algorithm>
#include <utility>

#include "ember/core/grad_mode.h"
#include "ember/core/ops.h"
#include "ember/core/ops/op_utils.h"

namespace ember::parallel {
namespace {

class CopyTransport final : public BucketTransport {
 public:
  void broadcast(const Tensor& source, const TensorList& destinations) override {
    NoGradGuard no_grad;
    for (Tensor dst : destinations) dst.copy_(source);
  }

  Tensor reduce_sum(const TensorList& sources, Device destination) override {
    EMBER_CHECK(!sources.empty(), "reduce_sum: no tensors to reduce");
    Tensor sum = sources[0].to(destination);
    for (size_t r = 1; r < sources.size(); ++r) sum = sum + sources[r].to(destination);
    return sum;
  }
};

int64_t numel_of(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

size_t bucketed_count(const std::vector<Bucket>& buckets) {
  size_t n = 0;
  for (const Bucket& b : buckets) n += b.members.size();
  return n;
}

}  // namespace

std::vector<Bucket> assign_buckets(const TensorList& tensors, size_t bucket_bytes) {
  std::vector<Bucket> buckets;
  std::vector<std::pair<DType, size_t>> open;  // dtype -> its open bucket
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    EMBER_CHECK(t.defined(), "assign_buckets: tensor " << i << " is undefined");
    auto it = std::find_if(open.begin(), open.end(), [&](const auto& o) { return o.first == t.dtype(); });
    if (it == open.end()) {
      buckets.push_back(Bucket{t.dtype(), {}, {}, 0});
      open.emplace_back(t.dtype(), buckets.size() - 1);
      it = open.end() - 1;
    }
    Bucket& b = buckets[it->second];
    b.members.push_back(i);
    b.shapes.push_back(t.shape());
    b.numel += t.numel();
    if (size_t(b.numel) * dtype_size(b.dtype) >= bucket_bytes) open.erase(it);
  }
  return buckets;
}

std::shared_ptr<BucketTransport> copy_transport() {
  static const std::shared_ptr<BucketTransport> transport = std::make_shared<CopyTransport>();
  return transport;
}

Tensor flatten_bucket(const TensorList& tensors, const Bucket& bucket, Device device) {
  TensorList parts;
  for (size_t j = 0; j < bucket.members.size(); ++j) {
    const Tensor& t = tensors.at(bucket.members[j]);
    if (!t.defined()) {
      parts.push_back(zeros({numel_of(bucket.shapes[j])}, bucket.dtype, device));
      continue;
    }
    EMBER_CHECK(t.device() == device, "flatten_bucket: member " << j << " (" << detail::describe(t) << ") is not on "
                                                                << device << " like the rest of its bucket");
    parts.push_back(t.reshape({-1}));
  }
  return parts.size() == 1 ? parts[0] : cat(parts, 0);
}

TensorList unflatten_bucket(const Tensor& flat, const Bucket& bucket) {
  EMBER_CHECK(flat.dim() == 1 && flat.numel() == bucket.numel, "unflatten_bucket: a bucket of "
                                                                   << bucket.numel << " elements does not fit in "
                                                                   << detail::describe(flat));
  TensorList views;
  int64_t offset = 0;
  for (const Shape& shape : bucket.shapes) {
    const int64_t n = numel_of(shape);
    views.push_back(flat.narrow(0, offset, n).view(shape));
    offset += n;
  }
  return views;
}

std::vector<TensorList> broadcast_coalesced(const TensorList& tensors, const std::vector<Device>& devices,
                                            const std::vector<Bucket>& buckets, BucketTransport& transport) {
  EMBER_CHECK(bucketed_count(buckets) == tensors.size(), "broadcast_coalesced: the buckets hold "
                                                             << bucketed_count(buckets) << " tensors, not "
                                                             << tensors.size());
  NoGradGuard no_grad;
  std::vector<TensorList> copies(devices.size(), TensorList(tensors.size()));
  for (const Bucket& b : buckets) {
    const Tensor source = flatten_bucket(tensors, b, tensors.at(b.members[0]).device());
    TensorList flats;
    for (const Device& d : devices) flats.push_back(empty({b.numel}, b.dtype, d));
    transport.broadcast(source, flats);
    for (size_t k = 0; k < devices.size(); ++k) {
      TensorList views = unflatten_bucket(flats[k], b);
      for (size_t j = 0; j < b.members.size(); ++j) copies[k][b.members[j]] = views[j];
    }
  }
  return copies;
}

TensorList reduce_add_coalesced(const std::vector<TensorList>& grads, Device destination,
                                const std::vector<Bucket>& buckets, BucketTransport& transport) {
  const size_t n = bucketed_count(buckets);
  for (size_t r = 0; r < grads.size(); ++r) {
    EMBER_CHECK(grads[r].size() == n, "reduce_add_coalesced: replica " << r << " has " << grads[r].size()
                                                                       << " gradients for " << n << " tensors");
  }
  TensorList sums(n);
  for (const Bucket& b : buckets) {
    TensorList sources;
    std::vector<bool> reached(b.members.size(), false);
    for (const TensorList& replica : grads) {
      const Tensor* any = nullptr;
      for (size_t j = 0; j < b.members.size(); ++j) {
        const Tensor& g = replica[b.members[j]];
        if (!g.defined()) continue;
        reached[j] = true;
        if (any == nullptr) any = &g;
      }
      if (any != nullptr) sources.push_back(flatten_bucket(replica, b, any->device()));
    }
    if (sources.empty()) continue;
    TensorList views = unflatten_bucket(transport.reduce_sum(sources, destination), b);
    for (size_t j = 0; j < b.members.size(); ++j) {
      if (reached[j]) sums[b.members[j]] = views[j];
    }
  }
  return sums;
}

}  // namespace ember::parallel
