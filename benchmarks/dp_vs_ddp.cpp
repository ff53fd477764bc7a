// dp_vs_ddp: trains one model for a fixed number of steps as a single
// device, DataParallel classic, DataParallel fast, or DistributedDataParallel
// (one process per device, under ember-run), in float32 and mixed
// precision, and prints a markdown table (rank 0 under ember-run); --csv
// appends the rows (benchmarks/dp_vs_ddp/rows.h has the columns).
// benchmarks/dp_vs_ddp_torch.py measures the same for PyTorch, and
// benchmarks/dp_vs_ddp.sh runs both over 1..N devices and draws the report.
//
//   dp_vs_ddp --model gpt --modes single,dp-classic,dp-fast --devices 4
//   ember-run --standalone --nproc-per-node 4 dp_vs_ddp --model gpt --modes ddp
//
// Models, batches, optimizers, precisions: benchmarks/dp_vs_ddp/workload.h.
// --batch is per device: DataParallel over N devices gets N * batch samples
// in one forward (made on device 0, as a loader's batch moved there), each
// DDP rank gets batch samples of its own (weak scaling: the work per device
// stays the same, so an ideal run is N times faster than one device).
// Devices: CUDA devices 0..N-1 (--devices N, default every visible GPU), or,
// on the CPU (--device cpu, or no GPU visible), N CPU replicas on threads
// for DataParallel (default 2; ember's CPU kernels are single-threaded) and
// N processes over gloo for DDP. DDP rank k uses cuda:LOCAL_RANK over NCCL.
//
// Figures of a case, after --warmup steps (default 3):
// - step time: median and p95 of --steps steps (default 20), from
//   bench::time_steps (CUDA events on device 0's stream, or wall time); a
//   DataParallel step ends with a synchronize of every device it used, so
//   its time includes all of their work.
// - throughput: the units (samples, or tokens for gpt) of all devices per
//   second at the median step time; scaling efficiency: throughput /
//   (N * throughput of the single-device run of the same model and
//   precision). Every invocation measures that single-device run itself
//   (rank 0 does, under ember-run, while the other ranks wait at a barrier)
//   and prints its row when "single" is among --modes.
// - peak memory per device (CUDA): cuda::max_memory_allocated of each
//   device over the timed steps (reset after warm-up); DataParallel's extra
//   load on device 0 (the whole batch, the gathered outputs, the loss, the
//   optimizer) shows in its column. "-" on the CPU.
// - DDP's all-reduce hidden behind backward, without instrumenting the
//   reducer: (a) the median DDP step, (b) the median of the same step under
//   ddp.no_sync() (no gradient communication), (c) the median time of
//   all-reducing alone tensors of the size and dtype of DDP's buckets, all
//   issued at once and then waited for, as the reducer does. The exposed
//   communication is a - b; hidden = 1 - clamp((a - b) / c, 0, 1). With
//   one rank, ember's all_reduce still runs through the backend (gloo or
//   NCCL with one member: nothing leaves the process), so c is the cost of
//   the collectives themselves, not network time, and the fraction says how
//   much of that cost backward hides. Medians of noisy figures: a - b can
//   come out below 0 (clamped: 100% hidden).
// Errors: a bad flag is a usage error (exit 2, bench::Flags). An ember::Error
// in a case prints which case failed and makes the exit status 1; the other
// single-process cases still run, while under ember-run the rank stops (the
// others would wait for it in a collective), and ember-run stops the job.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "benchmarks/bench_util.h"
#include "benchmarks/dp_vs_ddp/rows.h"
#include "benchmarks/dp_vs_ddp/workload.h"
#include "ember/ember.h"
#if EMBER_WITH_CUDA
#include "ember/core/cuda/caching_allocator.h"
#endif

namespace {

using namespace ember;
using bench::Precision;
using bench::Row;
using bench::Workload;

constexpr const char* kUsage =
    "dp_vs_ddp [--model mlp|cnn|gpt] [--modes single,dp-classic,dp-fast|ddp] [--precision fp32,amp] "
    "[--device cpu|cuda] [--devices N] [--batch N] [--steps N] [--warmup N] [--csv FILE] [--gpt-layers N] "
    "[--gpt-width N] [--gpt-heads N] [--gpt-context N] [--gpt-vocab N]";

struct Options {
  Workload workload;
  std::vector<std::string> modes;
  std::vector<std::string> precisions;  // "fp32", "amp"
  Device device = kCPU;                 // the kind of device: cpu or cuda:0
  int devices = 1;                      // for DataParallel
  int warmup = 3;
  int steps = 20;
  std::string csv;
};

struct Timed {
  std::vector<double> ms;
  std::vector<double> peak_mib;  // per device; empty on the CPU
};

double mib(size_t bytes) { return double(bytes) / (1024.0 * 1024.0); }

// Warm-up steps, then the peak memory of every device reset, then the
// timed steps and each device's peak over them.
Timed measure(const std::vector<Device>& devices, const Options& o, const std::function<void()>& step) {
  bench::time_steps(devices[0], o.warmup, 0, step);
#if EMBER_WITH_CUDA
  for (const Device& d : devices) {
    if (d.is_cuda()) cuda::reset_peak_memory_stats(d.index);
  }
#endif
  Timed t;
  t.ms = bench::time_steps(devices[0], 0, o.steps, step);
#if EMBER_WITH_CUDA
  for (const Device& d : devices) {
    if (d.is_cuda()) t.peak_mib.push_back(mib(cuda::max_memory_allocated(d.index)));
  }
#endif
  return t;
}

// baseline: the single-device throughput; 0 for the single-device row itself.
Row row_of(const std::string& mode, const Precision& p, int devices, const Workload& w, const Timed& t,
           double baseline) {
  Row r;
  r.mode = mode;
  r.precision = p.name;
  r.devices = devices;
  r.median_ms = bench::median(t.ms);
  r.p95_ms = bench::p95(t.ms);
  r.throughput = double(devices * w.batch * w.units_per_sample()) / (r.median_ms * 1e-3);
  r.efficiency = r.throughput / (double(devices) * (baseline > 0 ? baseline : r.throughput));
  r.peak_mib = t.peak_mib;
  return r;
}

int64_t parameter_count(const nn::Module& m) {
  int64_t n = 0;
  for (const Tensor& p : m.parameters()) n += p.numel();
  return n;
}

Row run_single(const Options& o, const Precision& p, Device device, int64_t& parameters) {
  const Workload& w = o.workload;
  std::shared_ptr<nn::UnaryModule> model = w.make_model();
  parameters = parameter_count(*model);
  model->to(device);
  std::unique_ptr<optim::Optimizer> optimizer = w.make_optimizer(model->parameters());
  auto [input, target] = w.make_batch(w.batch, device, 1);
  bench::TrainStep step(w, *model, *optimizer, p, device.type, input, target);
  return row_of("single", p, 1, w, measure({device}, o, std::ref(step)), 0);
}

Row run_data_parallel(const Options& o, const Precision& p, const std::vector<Device>& devices,
                      parallel::ReplicationMode mode, double baseline) {
  const Workload& w = o.workload;
  std::shared_ptr<nn::UnaryModule> net = w.make_model();
  net->to(devices[0]);
  parallel::DataParallelOptions dp_options;
  dp_options.mode = mode;
  auto dp = std::make_shared<parallel::DataParallel>(net, devices, dp_options);
  std::unique_ptr<optim::Optimizer> optimizer = w.make_optimizer(net->parameters());
  auto [input, target] = w.make_batch(int64_t(devices.size()) * w.batch, devices[0], 1);
  bench::TrainStep step(w, *dp, *optimizer, p, devices[0].type, input, target);
  auto synchronized = [&] {
    step();
    for (const Device& d : devices) {
      if (d.is_cuda()) cuda::synchronize(d.index);
    }
  };
  const char* name = mode == parallel::ReplicationMode::Classic ? "dp-classic" : "dp-fast";
  return row_of(name, p, int(devices.size()), w, measure(devices, o, synchronized), baseline);
}

// Every rank of `group` calls it; the row is complete on rank 0.
Row run_ddp(const Options& o, const Precision& p, const std::shared_ptr<parallel::ProcessGroup>& group, Device device,
            double baseline) {
  const Workload& w = o.workload;
  std::shared_ptr<nn::UnaryModule> net = w.make_model();
  net->to(device);
  auto ddp = std::make_shared<parallel::DistributedDataParallel>(net, group);
  std::unique_ptr<optim::Optimizer> optimizer = w.make_optimizer(ddp->parameters());
  auto [input, target] = w.make_batch(w.batch, device, 1 + uint64_t(group->rank()));
  bench::TrainStep step(w, *ddp, *optimizer, p, device.type, input, target);

  const Timed synced = measure({device}, o, std::ref(step));
  Row r = row_of("ddp", p, group->size(), w, synced, baseline);
  bench::DdpOverlap overlap;
  overlap.sync_ms = r.median_ms;
  {
    auto local = ddp->no_sync();
    overlap.no_sync_ms = bench::median(bench::time_steps(device, 1, o.steps, std::ref(step)));
  }
  // The buckets as the reducer has them now (rebuilt after the first backward).
  const nn::OrderedDict<Tensor> named = ddp->module()->named_parameters();
  TensorList buckets;
  for (const std::vector<std::string>& names : ddp->bucket_parameter_names()) {
    int64_t numel = 0;
    for (const std::string& name : names) numel += named.at(name).numel();
    buckets.push_back(zeros({numel}, named.at(names.front()).dtype(), device));
  }
  overlap.allreduce_ms = bench::median(bench::time_steps(device, 1, o.steps, [&] {
    std::vector<std::shared_ptr<parallel::Work>> works;
    for (const Tensor& b : buckets) works.push_back(group->all_reduce(b, parallel::ReduceOp::Avg));
    for (const auto& work : works) work->wait();
  }));
  r.ddp = overlap;

  if (!synced.peak_mib.empty()) {  // every rank's peak, in rank order
    std::vector<double> slots(size_t(group->size()), 0.0);
    slots[size_t(group->rank())] = synced.peak_mib[0];
    Tensor all = from_vector<double>(slots).to(device);
    group->all_reduce(all)->wait();
    r.peak_mib = to_vector<double>(all.cpu());
  }
  return r;
}

Options parse(int argc, char** argv, bool launched) {
  bench::Flags flags(argc, argv, kUsage);
  Options o;
  Workload& w = o.workload;
  w.model = flags.text("--model", "mlp", {"mlp", "cnn", "gpt"});
  const std::vector<std::string> dp_modes = {"single", "dp-classic", "dp-fast"};
  o.modes = flags.list("--modes", launched ? std::vector<std::string>{"ddp"} : dp_modes,
                       {"single", "dp-classic", "dp-fast", "ddp"});
  const bool ddp = std::find(o.modes.begin(), o.modes.end(), "ddp") != o.modes.end();
  if (ddp && o.modes.size() > 1)
    flags.fail(
        "--modes: ddp runs alone, one process per device under ember-run; run the single-process modes "
        "in another invocation");
  if (ddp && !launched)
    flags.fail(
        "--modes ddp: start it under ember-run, which sets RANK and WORLD_SIZE: ember-run --standalone "
        "--nproc-per-node N dp_vs_ddp --modes ddp ...");
  if (!ddp && launched)
    flags.fail("--modes " + o.modes.front() +
               ": the single-process modes run without a launcher (this process has "
               "RANK/WORLD_SIZE set); under ember-run use --modes ddp");
  o.precisions = flags.list("--precision", {"fp32", "amp"}, {"fp32", "amp"});
  o.device = flags.device();
  if (!ddp) {
    const int gpus = o.device.is_cuda() ? cuda::device_count() : 0;
    o.devices = int(flags.count("--devices", gpus > 0 ? gpus : 2, gpus > 0 ? gpus : 64));
  }
  w.batch = flags.count("--batch", w.model == "mlp" ? 256 : w.model == "cnn" ? 64 : 8, 1 << 20);
  o.steps = int(flags.count("--steps", 20, 100000));
  o.warmup = int(flags.count("--warmup", 3, 10000));
  o.csv = flags.text("--csv", "");
  const char* gpt_flags[] = {"--gpt-layers", "--gpt-width", "--gpt-heads", "--gpt-context", "--gpt-vocab"};
  if (!w.is_gpt()) {
    for (const char* f : gpt_flags) {
      if (!flags.text(f, "").empty()) flags.fail(std::string(f) + ": only with --model gpt");
    }
  } else {
    w.gpt.layers = flags.count("--gpt-layers", w.gpt.layers, 1000);
    w.gpt.width = flags.count("--gpt-width", w.gpt.width, 1 << 16);
    w.gpt.heads = flags.count("--gpt-heads", w.gpt.heads, 1 << 10);
    w.gpt.context = flags.count("--gpt-context", w.gpt.context, 1 << 16);
    w.gpt.vocab = flags.count("--gpt-vocab", w.gpt.vocab, 1 << 24);
    if (w.gpt.width % w.gpt.heads != 0)
      flags.fail("--gpt-width " + std::to_string(w.gpt.width) + " must be a multiple of --gpt-heads " +
                 std::to_string(w.gpt.heads));
  }
  flags.finish();
  return o;
}

bool launched_by_a_launcher() {
  for (const char* v : {"RANK", "WORLD_SIZE"}) {
    const char* s = std::getenv(v);
    if (s != nullptr && *s != '\0') return true;
  }
  return false;
}

std::string hardware(Device device) { return device.is_cuda() ? cuda::properties(device.index).name : "cpu"; }

void print_preamble(const Options& o, const std::string& where) {
  const Workload& w = o.workload;
  const std::string shape = w.is_gpt() ? " (" + w.gpt.str() + ")" : "";
  std::printf(
      "ember dp_vs_ddp: %s%s, batch %lld per device, median and p95 of %d steps after %d warm-up steps, "
      "on %s\n\n",
      w.model.c_str(), shape.c_str(), static_cast<long long>(w.batch), o.steps, o.warmup, where.c_str());
  bench::print_table_header(w.unit());
}

void finish_row(const Options& o, const bench::CsvContext& csv, const Row& r) {
  bench::print_table_row(o.workload.model, r);
  if (!o.csv.empty()) bench::append_csv(o.csv, csv, r);
}

bench::CsvContext csv_context(const Options& o, Device device, int64_t parameters) {
  return {o.workload.model, o.workload.shape(), hardware(device), o.workload.unit(), o.workload.batch, parameters};
}

// single, dp-classic and dp-fast in this process.
int run_single_process(const Options& o) {
  std::vector<Device> devices;
  for (int i = 0; i < o.devices; ++i) devices.push_back(o.device.is_cuda() ? cuda_device(i) : kCPU);
  const bool single_only = o.modes == std::vector<std::string>{"single"};
  const std::string count = single_only ? "1" : std::to_string(o.devices);
  const std::string where = o.device.is_cuda() ? count + " x " + hardware(o.device) + " (CUDA events)"
                            : single_only      ? "the CPU (wall time)"
                                               : count + " CPU replicas on threads (wall time)";
  print_preamble(o, where);
  int status = 0;
  for (const std::string& choice : o.precisions) {
    const Precision p = Precision::of(choice, o.device.type);
    int64_t parameters = 0;
    double baseline = 0;
    try {
      const Row single = run_single(o, p, devices[0], parameters);
      baseline = single.throughput;
      if (std::find(o.modes.begin(), o.modes.end(), "single") != o.modes.end())
        finish_row(o, csv_context(o, devices[0], parameters), single);
    } catch (const Error& e) {
      std::fprintf(stderr, "dp_vs_ddp: %s single %s failed: %s\n", o.workload.model.c_str(), p.name.c_str(), e.what());
      status = 1;
      continue;  // no baseline for the others
    }
    for (const std::string& mode : o.modes) {
      if (mode == "single") continue;
      try {
        const auto replication =
            mode == "dp-classic" ? parallel::ReplicationMode::Classic : parallel::ReplicationMode::Fast;
        finish_row(o, csv_context(o, devices[0], parameters), run_data_parallel(o, p, devices, replication, baseline));
      } catch (const Error& e) {
        std::fprintf(stderr, "dp_vs_ddp: %s %s %s on %d devices failed: %s\n", o.workload.model.c_str(), mode.c_str(),
                     p.name.c_str(), o.devices, e.what());
        status = 1;
      }
    }
  }
  return status;
}

// The cases of one rank over `group`; stops at the first failure.
int run_ddp_cases(const Options& o, const std::shared_ptr<parallel::ProcessGroup>& group, Device device) {
  const bool leader = group->rank() == 0;
  if (leader) {
    const std::string where = std::to_string(group->size()) + " ranks over " + group->backend() + ", " +
                              (device.is_cuda() ? hardware(device) + " each (CUDA events)" : "CPU (wall time)");
    print_preamble(o, where);
  }
  for (const std::string& choice : o.precisions) {
    const Precision p = Precision::of(choice, device.type);
    try {
      int64_t parameters = 0;
      double baseline = 0;
      if (leader) baseline = run_single(o, p, device, parameters).throughput;
      group->barrier()->wait();
      const Row r = run_ddp(o, p, group, device, baseline);
      if (leader) finish_row(o, csv_context(o, device, parameters), r);
    } catch (const Error& e) {
      std::fprintf(stderr, "dp_vs_ddp: rank %d: %s ddp %s on %d ranks failed: %s\n", group->rank(),
                   o.workload.model.c_str(), p.name.c_str(), group->size(), e.what());
      return 1;
    }
  }
  group->barrier()->wait();  // rank 0 serves the store: it leaves last
  return 0;
}

// One rank of --modes ddp under ember-run.
int run_distributed(const Options& o) {
  const parallel::RankInfo info = parallel::rank_info_from_env();
  Device device = kCPU;
  if (o.device.is_cuda()) {
    EMBER_CHECK(info.local_rank < cuda::device_count(),
                "dp_vs_ddp: rank " << info.rank << " is local rank " << info.local_rank << " but only "
                                   << cuda::device_count() << " CUDA devices are visible; start at most that many "
                                   << "ranks per node");
    device = cuda_device(info.local_rank);
    cuda::set_device(info.local_rank);
  }
  parallel::ProcessGroupOptions pg;
  if (device.is_cuda()) pg.nccl_device = device.index;
  parallel::init_process_group(device.is_cuda() ? "nccl" : "gloo", pg);
  const int status = run_ddp_cases(o, parallel::default_group(), device);
  if (status == 0) parallel::destroy_process_group();
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  const bool launched = launched_by_a_launcher();
  const Options o = parse(argc, argv, launched);
  try {
    return launched ? run_distributed(o) : run_single_process(o);
  } catch (const Error& e) {
    std::fprintf(stderr, "dp_vs_ddp: %s\n", e.what());
    return 1;
  }
}
