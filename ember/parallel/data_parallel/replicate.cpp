// ReplicaSet: building, updating and tying replicas to the original (see
// replicate.h).
#include "ember/parallel/data_parallel/replicate.h"

#include <string>
#include <utility>

#include "ember/core/autograd/function.h"
#include "ember/core/grad_mode.h"
#include "ember/core/ops.h"
#include "ember/core/ops/op_utils.h"

namespace ember::parallel {
namespace {

// What identifies the original's tensors for the replicas: a change in any
// of these rebuilds them.
struct TensorSlot {
  std::string name;
  Shape shape;
  DType dtype;
  bool requires_grad;
  bool operator==(const TensorSlot&) const = default;
};

// The state of an original tensor when a replica received it. The storage
// is held, so that its address cannot be reused by another one meanwhile.
struct Stamp {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;
  uint32_t version = 0;
  bool operator==(const Stamp&) const = default;
};

Stamp stamp_of(const Tensor& t) { return {t.storage(), t.storage_offset(), t.version()}; }

// Points a replica's tensor at its data, as Module::to does: every handle to
// it (the layer's member, the registry entry) sees it.
using ember::detail::point_at;

void clear_history(const Tensor& t, bool requires_grad) {
  autograd::AutogradMeta& m = autograd::meta(t);
  m.grad_fn = nullptr;
  m.output_nr = 0;
  m.requires_grad = requires_grad;
  m.grad = Tensor();
}

std::string quoted(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", '" : "'") + names[i] + "'";
  return s;
}

Bucket remap(Bucket b, const std::vector<size_t>& to) {
  for (size_t& m : b.members) m = to[m];
  return b;
}

}  // namespace

struct ReplicaSet::Layout {
  std::vector<TensorSlot> slots;  // the original's parameters, then its buffers
  std::vector<std::string> names;
  size_t num_params = 0;
  std::vector<size_t> grad_params;  // slots of the parameters that require grad
  // Over grad_params, for the gradient reduction (shared with the nodes).
  std::shared_ptr<const std::vector<Bucket>> grad_buckets;
  std::vector<Bucket> sync_buckets;  // over slots, for the broadcast
};

struct ReplicaSet::Replica {
  Device device;
  std::shared_ptr<nn::Module> module;
  std::vector<std::shared_ptr<nn::Module>> modules;  // module's tree, pre-order
  TensorList tensors;                                // aligned with Layout::slots
  std::vector<long> baseline;                        // use_count of each tensor's impl while nothing outside holds it
  TensorList flats;                                  // Fast: one per sync bucket, on device
  std::vector<uint32_t> flat_versions;               // Fast: each flat's version after its last copy
  std::vector<Stamp> received;                       // Fast: per slot, the original's stamp when last copied

  // Whether a graph (a saved tensor) still holds one of the tensors.
  bool in_use() const {
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].impl_ptr().use_count() > baseline[i]) return true;
    }
    return false;
  }
};

void check_module_device(const nn::Module& module, Device device) {
  auto check = [&](const nn::OrderedDict<Tensor>& tensors, const char* kind) {
    for (const auto& item : tensors) {
      const Device found = item.value.device();
      EMBER_CHECK(found == device, "module must have its parameters and buffers on device "
                                       << device << " (device_ids[0]) but found one of them on device: " << found
                                       << " (" << kind << " '" << item.key << "'); call module->to(" << device
                                       << ") before wrapping it");
    }
  };
  check(module.named_parameters(), "parameter");
  check(module.named_buffers(), "buffer");
}

ReplicaSet::ReplicaSet(std::shared_ptr<nn::Module> original, std::vector<Device> devices, ReplicationMode mode,
                       size_t bucket_bytes, std::shared_ptr<BucketTransport> transport)
    : original_(std::move(original)),
      devices_(std::move(devices)),
      mode_(mode),
      bucket_bytes_(bucket_bytes),
      transport_(transport ? std::move(transport) : copy_transport()) {
  EMBER_CHECK(original_ != nullptr, "ReplicaSet: the module is null");
  EMBER_CHECK(!devices_.empty(), "ReplicaSet: no devices to replicate " << original_->name() << " onto");
  EMBER_CHECK(bucket_bytes_ > 0, "ReplicaSet: bucket_bytes must be positive");
}

ReplicaSet::~ReplicaSet() = default;

void ReplicaSet::rebuild_layout(const TensorList& originals, const std::vector<std::string>& names, size_t num_params) {
  auto layout = std::make_unique<Layout>();
  layout->names = names;
  layout->num_params = num_params;
  std::vector<size_t> frozen, buffers;
  TensorList grad_tensors, frozen_tensors;
  for (size_t i = 0; i < originals.size(); ++i) {
    const Tensor& t = originals[i];
    layout->slots.push_back({names[i], t.shape(), t.dtype(), t.requires_grad()});
    if (i >= num_params) {
      buffers.push_back(i);
    } else if (t.requires_grad()) {
      layout->grad_params.push_back(i);
      grad_tensors.push_back(t);
    } else {
      frozen.push_back(i);
      frozen_tensors.push_back(t);
    }
  }
  // Trainable and frozen parameters in separate buckets, so that a step of
  // the trainable ones leaves the frozen buckets unsent in the fast mode.
  auto grad_buckets = std::make_shared<std::vector<Bucket>>(assign_buckets(grad_tensors, bucket_bytes_));
  for (const Bucket& b : *grad_buckets) layout->sync_buckets.push_back(remap(b, layout->grad_params));
  for (const Bucket& b : assign_buckets(frozen_tensors, bucket_bytes_)) {
    layout->sync_buckets.push_back(remap(b, frozen));
  }
  for (size_t i : buffers) {
    const Tensor& t = originals[i];
    layout->sync_buckets.push_back(Bucket{t.dtype(), {i}, {t.shape()}, t.numel()});
  }
  layout->grad_buckets = std::move(grad_buckets);
  layout_ = std::move(layout);
  replicas_.clear();
  replicas_.resize(devices_.size());
}

std::unique_ptr<ReplicaSet::Replica> ReplicaSet::build(Device device) const {
  auto r = std::make_unique<Replica>();
  r->device = device;
  r->module = nn::clone(original_);
  r->modules = r->module->modules();
  {
    std::vector<std::string> names;
    for (const auto& item : r->module->named_parameters()) {
      names.push_back(item.key);
      r->tensors.push_back(item.value);
    }
    for (const auto& item : r->module->named_buffers()) {
      names.push_back(item.key);
      r->tensors.push_back(item.value);
    }
    EMBER_CHECK(names == layout_->names, "replicate: the clone() of "
                                             << original_->name() << " has the parameters and buffers ["
                                             << quoted(names) << "] but the original has [" << quoted(layout_->names)
                                             << "]; its clone() must rebuild the same tree, tied tensors included "
                                                "(see nn/module.h)");
  }
  // Off the original's device at once: the clone's own copies are not needed.
  NoGradGuard no_grad;
  if (mode_ == ReplicationMode::Fast) {
    for (const Bucket& b : layout_->sync_buckets) {
      Tensor flat = empty({b.numel}, b.dtype, device);
      TensorList views = unflatten_bucket(flat, b);
      for (size_t j = 0; j < b.members.size(); ++j) point_at(r->tensors[b.members[j]], views[j]);
      r->flats.push_back(flat);
      r->flat_versions.push_back(flat.version());
    }
    r->received.resize(r->tensors.size());  // empty stamps: everything is sent at the first update
  } else {
    for (const Tensor& t : r->tensors) point_at(t, empty(t.shape(), t.dtype(), device));
  }
  for (const Tensor& t : r->tensors) r->baseline.push_back(t.impl_ptr().use_count());
  return r;
}

std::vector<std::shared_ptr<nn::Module>> ReplicaSet::update(size_t n) {
  EMBER_CHECK(n >= 1 && n <= devices_.size(),
              "ReplicaSet::update: asked for " << n << " modules but there are " << devices_.size() << " devices");
  TensorList originals;
  std::vector<std::string> names;
  size_t num_params = 0;
  {
    for (const auto& item : original_->named_parameters()) {
      names.push_back(item.key);
      originals.push_back(item.value);
    }
    num_params = originals.size();
    for (const auto& item : original_->named_buffers()) {
      names.push_back(item.key);
      originals.push_back(item.value);
    }
  }
  check_module_device(*original_, devices_[0]);
  bool same_layout =
      layout_ != nullptr && layout_->num_params == num_params && layout_->slots.size() == originals.size();
  for (size_t i = 0; same_layout && i < originals.size(); ++i) {
    const Tensor& t = originals[i];
    same_layout = layout_->slots[i] == TensorSlot{names[i], t.shape(), t.dtype(), t.requires_grad()};
  }
  if (!same_layout) rebuild_layout(originals, names, num_params);

  for (size_t k = 1; k < n; ++k) {
    if (!replicas_[k] || (mode_ == ReplicationMode::Classic && replicas_[k]->in_use())) {
      replicas_[k] = build(devices_[k]);
    }
  }
  // Training flags, module by module (train() recurses, so parents first).
  std::vector<std::shared_ptr<nn::Module>> tree = original_->modules();
  for (size_t k = 1; k < n; ++k) {
    std::vector<std::shared_ptr<nn::Module>>& mods = replicas_[k]->modules;
    bool same = mods.size() == tree.size();
    for (size_t i = 0; same && i < tree.size(); ++i) same = mods[i]->is_training() == tree[i]->is_training();
    if (same) continue;
    if (mods.size() != tree.size()) {
      replicas_[k]->module->train(original_->is_training());
      continue;
    }
    for (size_t i = 0; i < tree.size(); ++i) mods[i]->train(tree[i]->is_training());
  }

  if (mode_ == ReplicationMode::Classic) broadcast_all(originals, n);
  else broadcast_changed(originals, n);
  record_history(originals, n);

  std::vector<std::shared_ptr<nn::Module>> modules{original_};
  for (size_t k = 1; k < n; ++k) modules.push_back(replicas_[k]->module);
  return modules;
}

void ReplicaSet::broadcast_all(const TensorList& originals, size_t n) {
  if (n < 2) return;
  const std::vector<Device> targets(devices_.begin() + 1, devices_.begin() + ptrdiff_t(n));
  std::vector<TensorList> copies = broadcast_coalesced(originals, targets, layout_->sync_buckets, *transport_);
  for (size_t k = 1; k < n; ++k) {
    const TensorList& mine = copies[k - 1];
    for (size_t i = 0; i < mine.size(); ++i) point_at(replicas_[k]->tensors[i], mine[i]);
  }
}

void ReplicaSet::broadcast_changed(const TensorList& originals, size_t n) {
  NoGradGuard no_grad;
  for (size_t bi = 0; bi < layout_->sync_buckets.size(); ++bi) {
    const Bucket& b = layout_->sync_buckets[bi];
    TensorList stale;
    std::vector<Replica*> receivers;
    for (size_t k = 1; k < n; ++k) {
      Replica& r = *replicas_[k];
      bool fresh = r.flats[bi].version() == r.flat_versions[bi];
      for (size_t j = 0; fresh && j < b.members.size(); ++j) {
        fresh = r.received[b.members[j]] == stamp_of(originals[b.members[j]]);
      }
      if (fresh) continue;
      stale.push_back(r.flats[bi]);
      receivers.push_back(&r);
    }
    if (stale.empty()) continue;
    transport_->broadcast(flatten_bucket(originals, b, devices_[0]), stale);
    for (Replica* r : receivers) {
      r->flat_versions[bi] = r->flats[bi].version();
      for (size_t m : b.members) r->received[m] = stamp_of(originals[m]);
    }
  }
}

void ReplicaSet::record_history(const TensorList& originals, size_t n) {
  const Layout& layout = *layout_;
  for (size_t k = 1; k < n; ++k) {
    for (size_t i = 0; i < layout.num_params; ++i) {
      clear_history(replicas_[k]->tensors[i], layout.slots[i].requires_grad);
    }
  }
  if (!GradMode::is_enabled() || layout.grad_params.empty() || n < 2) return;
  std::vector<Tensor*> outputs;
  for (size_t k = 1; k < n; ++k) {
    for (size_t i : layout.grad_params) outputs.push_back(&replicas_[k]->tensors[i]);
  }
  TensorList inputs;
  for (size_t i : layout.grad_params) inputs.push_back(originals[i]);
  const size_t per_replica = layout.grad_params.size();
  const size_t replicas = n - 1;
  const Device destination = devices_[0];
  auto buckets = layout.grad_buckets;
  auto transport = transport_;
  autograd::record("BroadcastBackward", outputs, inputs,
                   [per_replica, replicas, destination, buckets, transport](const TensorList& grads) {
                     std::vector<TensorList> by_replica;
                     for (size_t r = 0; r < replicas; ++r) {
                       by_replica.emplace_back(grads.begin() + ptrdiff_t(r * per_replica),
                                               grads.begin() + ptrdiff_t((r + 1) * per_replica));
                     }
                     return reduce_add_coalesced(by_replica, destination, *buckets, *transport);
                   });
}

std::vector<std::shared_ptr<nn::Module>> replicate(const std::shared_ptr<nn::Module>& module,
                                                   const std::vector<Device>& devices, size_t bucket_bytes) {
  ReplicaSet set(module, devices, ReplicationMode::Classic, bucket_bytes);
  return set.update(devices.size());
}

}  // namespace ember::parallel
