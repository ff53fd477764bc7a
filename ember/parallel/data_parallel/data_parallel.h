// parallel::DataParallel: single-process data parallelism over several
// devices, as torch.nn.DataParallel.
//
//   auto net = train::make_cnn(0.25);
//   net->to(cuda_device(0));                       // the module lives on device_ids[0]
//   auto dp = std::make_shared<parallel::DataParallel>(net, std::vector<int>{0, 1});
//   optim::Adam opt(dp->parameters(), {.lr = 1e-3});  // net's own parameters
//   Tensor loss = nn::functional::cross_entropy(dp->forward(images), labels);
//   loss.backward();                                 // net's grads: the sum over replicas
//   opt.step();
//
// Each forward
//  1. checks that the module's parameters and buffers are on device_ids[0]
//     (PyTorch's error, with the fix);
//  2. scatters the inputs along dim over the devices: the scatter() hook, by
//     default options.scatter if given, else parallel::scatter with
//     options.chunk_sizes (torch.chunk's split when empty). Pieces a custom
//     scatter leaves on another device are moved to theirs;
//  3. updates the replicas (ember/parallel/data_parallel/replicate.h): replica 0 is the module
//     itself, the others are kept clones holding its current parameters
//     and buffers, tied to them for backward;
//  4. runs the replicas at once, one thread per device (parallel_apply);
//  5. gathers the outputs on output_device (device_ids[0] by default; the CPU
//     is allowed).
// Backward flows through the gather, the replicas and the scatter; the
// module's parameters receive the sum of the replicas' gradients, so an
// optimizer on the module just works. With grad mode off (evaluation) no
// graph is recorded.
//
// Devices: CUDA devices by logical id (see ember/core/cuda/devices.h), or the CPU
// listed several times: std::vector<Device>(3, kCPU) runs three CPU replicas
// on three threads, which is how CI exercises the whole flow (and, ember's
// CPU kernels being single-threaded, a way to use several cores).
// DataParallel(module) takes every visible GPU and, without one, runs the
// module as it is, as PyTorch does.
//
// Buffers follow PyTorch: replica 0 is the module, so its updates (BatchNorm
// running statistics from its piece of the batch) are the ones kept; the
// other replicas' are discarded. In training mode each replica normalizes
// with the statistics of its own piece, so DataParallel over a BatchNorm
// network equals the module applied piece by piece, not to the whole batch.
//
// Modes (options.mode): Classic copies the parameters and buffers to the
// replicas at every forward, as PyTorch does. Fast keeps the replicas' copies
// and worker threads between forwards and sends a bucket of parameters only
// after it changed (after optimizer.step(); never for frozen ones). Both
// compute the same numbers. The copies and the gradient reduction (one per
// bucket of options.bucket_bytes) go through options.transport: by
// default, in Fast mode over several GPUs, NCCL (one ncclBroadcast or
// ncclReduce a bucket, ember/parallel/data_parallel/nccl_transport.h), else device-generic
// copies (coalesced.h).
//
// One-time warnings (ember/parallel/data_parallel/warn_once.h): a batch that gives fewer pieces
// than devices (it runs on fewer devices, as PyTorch does), a batch not a
// multiple of the device count, GPUs with less than 75% of the memory or
// SM count of another (PyTorch's imbalance warning).
// Errors: an empty device list, a CUDA id outside the visible range (with
// the logical -> physical mapping), a GPU listed twice, CPU and CUDA devices
// mixed, a module that is not a UnaryModule without options.forward.
//
// It is a Module: the wrapped module is its child "module", so its
// state_dict keys are "module.<name>" as in PyTorch, and parameters(), to(),
// train()/eval() reach the module. clone() clones the module and keeps the
// devices and options. Not thread-safe: one forward at a time.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "ember/nn/module.h"
#include "ember/parallel/data_parallel/parallel_apply.h"
#include "ember/parallel/data_parallel/replicate.h"
#include "ember/parallel/data_parallel/value.h"
#include "ember/parallel/distributed/coalesced.h"

namespace ember::parallel {

// A custom scatter: one Value per device used (at most devices.size()),
// piece k meant for devices[k].
using ScatterFn =
    std::function<std::vector<Value>(const Value& inputs, const std::vector<Device>& devices, int64_t dim)>;

struct DataParallelOptions {
  std::optional<Device> output_device;  // where the outputs are gathered; device_ids[0] when unset
  int64_t dim = 0;                      // the batch dim that scatter splits and gather joins
  std::vector<int64_t> chunk_sizes;     // explicit piece sizes along dim (GPUs of different speed)
  ScatterFn scatter;                    // a custom distribution of the inputs (replaces chunk_sizes)
  ReplicaForward forward;               // how a replica is called; default: UnaryModule::forward
  ReplicationMode mode = ReplicationMode::Classic;
  size_t bucket_bytes = kDefaultBucketBytes;
  std::shared_ptr<BucketTransport>
      transport;  // default: nccl_transport() in fast mode over several GPUs, else copy_transport()
};

class DataParallel : public nn::UnaryModule {
 public:
  // Every visible GPU; none: the module runs as it is.
  explicit DataParallel(std::shared_ptr<nn::Module> module, DataParallelOptions options = {});
  DataParallel(std::shared_ptr<nn::Module> module, std::vector<Device> device_ids, DataParallelOptions options = {});
  DataParallel(std::shared_ptr<nn::Module> module, std::vector<Device> device_ids, Device output_device,
               int64_t dim = 0);
  // CUDA devices by logical id.
  DataParallel(std::shared_ptr<nn::Module> module, const std::vector<int>& device_ids,
               DataParallelOptions options = {});
  DataParallel(std::shared_ptr<nn::Module> module, const std::vector<int>& device_ids, int output_device,
               int64_t dim = 0);

  Tensor forward(const Tensor& input) override;
  Value forward(const Value& inputs);
  using UnaryModule::operator();
  Value operator()(const Value& inputs) { return forward(inputs); }

  const std::shared_ptr<nn::Module>& module() const { return module_; }
  const std::vector<Device>& device_ids() const { return device_ids_; }
  Device output_device() const { return output_device_; }
  const DataParallelOptions& options() const { return options_; }

  std::shared_ptr<nn::Module> clone() const override;

 protected:
  // The scatter step; override it for a custom distribution of the inputs.
  virtual std::vector<Value> scatter(const Value& inputs, const std::vector<Device>& devices);

 private:
  void adopt_module();
  void set_devices(std::vector<Device> device_ids);
  void warn_about_pieces(const Value& inputs, const std::vector<Value>& pieces) const;

  std::shared_ptr<nn::Module> module_;
  std::vector<Device> device_ids_;
  Device output_device_;
  DataParallelOptions options_;
  ReplicaForward call_;
  std::unique_ptr<ReplicaSet> replicas_;
  std::unique_ptr<ReplicaThreads> threads_;  // Fast mode
};

}  // namespace ember::parallel
