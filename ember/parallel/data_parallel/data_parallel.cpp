// DataParallel: device checks, the forward pipeline and the warnings (see
// data_parallel.h).
#include "ember/parallel/data_parallel/data_parallel.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>

#include "ember/core/cuda/devices.h"
#include "ember/core/ops/op_utils.h"
#if EMBER_WITH_CUDA
#include "ember/parallel/data_parallel/nccl_transport.h"
#endif
#include "ember/parallel/data_parallel/scatter_gather.h"
#include "ember/parallel/data_parallel/warn_once.h"

namespace ember::parallel {
namespace {

std::vector<Device> cuda_devices(const std::vector<int>& ids) {
  std::vector<Device> out;
  for (int id : ids) out.push_back(Device(DeviceType::CUDA, id));
  return out;
}

DataParallelOptions placed(std::optional<Device> output_device, int64_t dim) {
  DataParallelOptions o;
  o.output_device = output_device;
  o.dim = dim;
  return o;
}

std::string devices_str(const std::vector<Device>& devices) {
  std::string s = "{";
  for (size_t i = 0; i < devices.size(); ++i) s += (i ? ", " : "") + devices[i].str();
  return s + "}";
}

// Any Device may appear in a message; a CUDA id is checked against what is
// visible, with the mapping in the error.
void check_cuda_device(const Device& d, const char* role) {
  try {
    cuda::check_visible_device(d.index);
  } catch (const Error& e) {
    throw Error(std::string("DataParallel: ") + role + " " + d.str() + ": " + e.what());
  }
}

// PyTorch's _check_balance: warn when a GPU has less than 75% of the memory,
// or else of the multiprocessors, of another.
void check_balance(const std::vector<Device>& ids) {
  const std::vector<cuda::RuntimeDevice> runtime = cuda::device_system().runtime_devices();
  auto imbalanced = [&](auto property) {
    size_t min_pos = 0, max_pos = 0;
    for (size_t i = 1; i < ids.size(); ++i) {
      if (property(runtime[size_t(ids[i].index)]) < property(runtime[size_t(ids[min_pos].index)])) min_pos = i;
      if (property(runtime[size_t(ids[i].index)]) > property(runtime[size_t(ids[max_pos].index)])) max_pos = i;
    }
    const double low = double(property(runtime[size_t(ids[min_pos].index)]));
    const double high = double(property(runtime[size_t(ids[max_pos].index)]));
    if (high <= 0 || low / high >= 0.75) return false;
    warn_once("DataParallel.imbalance",
              "DataParallel: there is an imbalance between your GPUs. You may want to exclude GPU " +
                  std::to_string(ids[min_pos].index) + " which has less than 75% of the memory or cores of GPU " +
                  std::to_string(ids[max_pos].index) +
                  ". You can do so by setting the device_ids argument to DataParallel, or by setting the "
                  "CUDA_VISIBLE_DEVICES environment variable.");
    return true;
  };
  if (imbalanced([](const cuda::RuntimeDevice& d) { return d.total_memory; })) return;
  imbalanced([](const cuda::RuntimeDevice& d) { return size_t(d.multiprocessor_count); });
}

Value placed_on(const Value& v, Device device) {
  if (v.is_tensor()) return v.tensor().device() == device ? v : Value(v.tensor().to(device));
  if (!v.is_list()) return v;
  std::vector<Value> items;
  for (const Value& item : v.items()) items.push_back(placed_on(item, device));
  return Value::list(std::move(items));
}

}  // namespace

DataParallel::DataParallel(std::shared_ptr<nn::Module> module, DataParallelOptions options)
    : module_(std::move(module)), options_(std::move(options)) {
  adopt_module();
  std::vector<Device> all;
  const size_t visible = cuda::device_system().runtime_devices().size();
  for (size_t i = 0; i < visible; ++i) all.push_back(cuda_device(int(i)));
  // No GPU: device_ids_ stays empty and the module runs as it is, as
  // PyTorch's DataParallel does.
  if (!all.empty()) set_devices(std::move(all));
}

DataParallel::DataParallel(std::shared_ptr<nn::Module> module, std::vector<Device> device_ids,
                           DataParallelOptions options)
    : module_(std::move(module)), options_(std::move(options)) {
  adopt_module();
  set_devices(std::move(device_ids));
}

DataParallel::DataParallel(std::shared_ptr<nn::Module> module, std::vector<Device> device_ids, Device output_device,
                           int64_t dim)
    : DataParallel(std::move(module), std::move(device_ids), placed(output_device, dim)) {}

DataParallel::DataParallel(std::shared_ptr<nn::Module> module, const std::vector<int>& device_ids,
                           DataParallelOptions options)
    : DataParallel(std::move(module), cuda_devices(device_ids), std::move(options)) {}

DataParallel::DataParallel(std::shared_ptr<nn::Module> module, const std::vector<int>& device_ids, int output_device,
                           int64_t dim)
    : DataParallel(std::move(module), cuda_devices(device_ids), placed(cuda_device(output_device), dim)) {}

void DataParallel::adopt_module() {
  EMBER_CHECK(module_ != nullptr, "DataParallel: the module is null");
  register_module("module", module_);
  EMBER_CHECK(options_.bucket_bytes > 0, "DataParallel: bucket_bytes must be positive");
  if (options_.forward) {
    call_ = options_.forward;
    return;
  }
  EMBER_CHECK(dynamic_cast<nn::UnaryModule*>(module_.get()) != nullptr,
              "DataParallel: " << module_->name()
                               << " is not a UnaryModule (one tensor in, one tensor out), so DataParallel does not "
                                  "know how to call it; pass DataParallelOptions::forward, e.g. [](nn::Module& m, "
                                  "const parallel::Value& in) { return parallel::Value(static_cast<MyNet&>(m)"
                                  ".forward(in[0].tensor(), in[1].tensor())); }");
  call_ = [](nn::Module& m, const Value& in) { return Value(static_cast<nn::UnaryModule&>(m).forward(in.tensor())); };
}

void DataParallel::set_devices(std::vector<Device> device_ids) {
  EMBER_CHECK(!device_ids.empty(),
              "DataParallel: device_ids is empty; give the devices to run on (std::vector<int>{0, "
              "1} for two GPUs, std::vector<Device>(2, kCPU) for two CPU replicas), or use "
              "DataParallel(module) for every visible GPU");
  const bool cuda = device_ids[0].is_cuda();
  std::set<int> seen;
  for (const Device& d : device_ids) {
    EMBER_CHECK(d.is_cuda() == cuda, "DataParallel: device_ids " << devices_str(device_ids)
                                                                 << " mix the CPU and CUDA devices; use GPUs only, or "
                                                                    "the CPU only (listed once per replica)");
    if (!cuda) continue;
    check_cuda_device(d, "device_ids has");
    EMBER_CHECK(seen.insert(d.index).second, "DataParallel: device_ids "
                                                 << devices_str(device_ids) << " lists " << d
                                                 << " twice; a GPU holds one replica, so list each GPU once (only the "
                                                    "CPU may repeat, one entry per CPU replica)");
  }
  device_ids_ = std::move(device_ids);
  output_device_ = options_.output_device.value_or(device_ids_[0]);
  if (output_device_.is_cuda()) check_cuda_device(output_device_, "output_device");
  if (cuda && device_ids_.size() > 1) check_balance(device_ids_);
  std::shared_ptr<BucketTransport> transport = options_.transport;
#if EMBER_WITH_CUDA
  // The fast mode's buckets go through NCCL between GPUs (one collective a
  // bucket); the classic mode's copies stay peer copies, as in PyTorch.
  if (!transport && cuda && device_ids_.size() > 1 && options_.mode == ReplicationMode::Fast) {
    transport = nccl_transport(device_ids_);
  }
#endif
  replicas_ = std::make_unique<ReplicaSet>(module_, device_ids_, options_.mode, options_.bucket_bytes, transport);
}

std::vector<Value> DataParallel::scatter(const Value& inputs, const std::vector<Device>& devices) {
  if (options_.scatter) return options_.scatter(inputs, devices, options_.dim);
  std::vector<Value> pieces = parallel::scatter(inputs, devices, options_.dim, options_.chunk_sizes);
  if (options_.chunk_sizes.empty()) warn_about_pieces(inputs, pieces);
  return pieces;
}

void DataParallel::warn_about_pieces(const Value& inputs, const std::vector<Value>& pieces) const {
  const size_t devices = device_ids_.size();
  const Tensor first = inputs.tensors().at(0);
  const int64_t n = first.size(detail::wrap_dim("DataParallel", options_.dim, first.dim(), first.shape()));
  const std::string sizes = shape_str(chunk_sizes_for(n, devices));
  const std::string along = " along dim " + std::to_string(options_.dim);
  if (pieces.size() < devices) {
    warn_once("DataParallel.fewer_pieces",
              "DataParallel: the batch of " + std::to_string(n) + along + " splits into " +
                  std::to_string(pieces.size()) + " pieces " + sizes + " for " + std::to_string(devices) +
                  " devices, so it runs on the first " + std::to_string(pieces.size()) +
                  " devices only (as PyTorch does); a batch of at least " + std::to_string(devices) +
                  ", and a multiple of " + std::to_string(devices) + ", keeps every device busy");
  } else if (n % int64_t(devices) != 0) {
    const int64_t lower = n - n % int64_t(devices);
    warn_once("DataParallel.uneven_batch",
              "DataParallel: the batch of " + std::to_string(n) + along + " is not a multiple of the " +
                  std::to_string(devices) + " devices, so its pieces " + sizes +
                  " are uneven and the devices with less work wait for the others; a batch size that is a multiple "
                  "of " +
                  std::to_string(devices) + " (" + std::to_string(lower) + " or " +
                  std::to_string(lower + int64_t(devices)) + ") balances them");
  }
}

Value DataParallel::forward(const Value& inputs) {
  if (device_ids_.empty()) return call_(*module_, inputs);
  check_module_device(*module_, device_ids_[0]);
  std::vector<Value> pieces = scatter(inputs, device_ids_);
  const size_t k = device_ids_.size();
  EMBER_CHECK(!pieces.empty() && pieces.size() <= k, "DataParallel: scatter gave " << pieces.size() << " pieces for "
                                                                                   << k
                                                                                   << " devices; it must give between "
                                                                                      "1 and "
                                                                                   << k);
  const std::vector<Device> used(device_ids_.begin(), device_ids_.begin() + ptrdiff_t(pieces.size()));
  for (size_t i = 0; i < pieces.size(); ++i) pieces[i] = placed_on(pieces[i], used[i]);
  std::vector<std::shared_ptr<nn::Module>> modules = replicas_->update(pieces.size());
  if (options_.mode == ReplicationMode::Fast && threads_ == nullptr && k > 1) {
    threads_ = std::make_unique<ReplicaThreads>(k - 1);
  }
  std::vector<Value> outputs = parallel_apply(modules, pieces, used, call_, threads_.get());
  return gather(outputs, output_device_, options_.dim);
}

Tensor DataParallel::forward(const Tensor& input) {
  Value out = forward(Value(input));
  EMBER_CHECK(out.is_tensor(), "DataParallel: the replicas returned " << out.str()
                                                                      << ", not one tensor; call "
                                                                         "forward(parallel::Value) to get it");
  return out.tensor();
}

std::shared_ptr<nn::Module> DataParallel::clone() const {
  if (device_ids_.empty()) return clone_as<DataParallel>(module_->clone(), options_);
  return clone_as<DataParallel>(module_->clone(), device_ids_, options_);
}

}  // namespace ember::parallel
