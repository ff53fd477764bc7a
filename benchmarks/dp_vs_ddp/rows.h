// benchmarks/dp_vs_ddp's results: one Row per (model, mode, precision,
// devices), printed as a markdown table row and appended to a CSV whose
// columns benchmarks/dp_vs_ddp_torch.py writes too (framework "torch").
//
// CSV columns (kCsvHeader), one row per case; an empty field is a figure
// that does not apply (memory on the CPU, the DDP columns of other modes):
//   framework, model, model_shape, parameters (the model's parameter
//   count), mode (single, dp-classic, dp-fast, ddp),
//   precision (fp32, amp-fp16, amp-bf16), devices, hardware,
//   batch_per_device, unit (samples or tokens), throughput (units per
//   second over all devices: devices * batch_per_device * units per sample
//   / median step time), efficiency (throughput / (devices * the
//   throughput of the single-device run of the same model and precision)),
//   step_ms_median, step_ms_p95, peak_mib_dev0 (peak allocated MiB on
//   device 0 / rank 0's device), peak_mib_other_max (the largest peak of
//   the other devices), peak_mib_all (every device's peak, ';'-separated),
//   ddp_sync_ms, ddp_no_sync_ms, allreduce_ms (medians of the DDP step, of
//   the same step under no_sync, of all-reducing the gradient buckets
//   alone), hidden_fraction (1 - clamp((sync - no_sync) / allreduce, 0, 1)).
// The header is written when the file is new or empty.
#pragma once

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "ember/core/error.h"

namespace ember::bench {

inline constexpr const char* kCsvHeader =
    "framework,model,model_shape,parameters,mode,precision,devices,hardware,batch_per_device,unit,throughput,"
    "efficiency,"
    "step_ms_median,step_ms_p95,peak_mib_dev0,peak_mib_other_max,peak_mib_all,ddp_sync_ms,ddp_no_sync_ms,"
    "allreduce_ms,hidden_fraction";

struct DdpOverlap {
  double sync_ms = 0;       // the DDP step
  double no_sync_ms = 0;    // the same step under no_sync(): no gradient communication
  double allreduce_ms = 0;  // the gradient buckets all-reduced alone

  // The fraction of the all-reduce time that the step does not show;
  // none when the all-reduce took no measurable time.
  std::optional<double> hidden() const {
    if (allreduce_ms <= 0) return std::nullopt;
    return 1.0 - std::clamp((sync_ms - no_sync_ms) / allreduce_ms, 0.0, 1.0);
  }
};

struct Row {
  std::string mode;
  std::string precision;
  int devices = 1;
  double throughput = 0;
  double efficiency = 0;
  double median_ms = 0;
  double p95_ms = 0;
  std::vector<double> peak_mib;  // per device in order; empty on the CPU
  std::optional<DdpOverlap> ddp;
};

namespace detail {

inline std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

inline std::string joined(const std::vector<double>& values, const char* separator) {
  std::string s;
  for (size_t i = 0; i < values.size(); ++i) s += (i ? separator : "") + fixed(values[i], 0);
  return s;
}

}  // namespace detail

inline void print_table_header(const char* unit) {
  std::printf(
      "| model | mode | precision | devices | %s/s | efficiency | step ms median | step ms p95 | "
      "peak MiB per device | DDP ms: sync / no_sync / all-reduce | all-reduce hidden |\n",
      unit);
  std::printf("|---|---|---|---:|---:|---:|---:|---:|---|---|---:|\n");
}

inline void print_table_row(const std::string& model, const Row& r) {
  using detail::fixed;
  const std::string memory = r.peak_mib.empty() ? "-" : detail::joined(r.peak_mib, " / ");
  std::string overlap = "-", hidden = "-";
  if (r.ddp) {
    overlap = fixed(r.ddp->sync_ms, 2) + " / " + fixed(r.ddp->no_sync_ms, 2) + " / " + fixed(r.ddp->allreduce_ms, 2);
    if (r.ddp->hidden()) hidden = fixed(100 * *r.ddp->hidden(), 0) + "%";
  }
  std::printf("| %s | %s | %s | %d | %.0f | %.2f | %.2f | %.2f | %s | %s | %s |\n", model.c_str(), r.mode.c_str(),
              r.precision.c_str(), r.devices, r.throughput, r.efficiency, r.median_ms, r.p95_ms, memory.c_str(),
              overlap.c_str(), hidden.c_str());
  std::fflush(stdout);
}

// What every row of one run shares.
struct CsvContext {
  std::string model, model_shape, hardware, unit;
  int64_t batch_per_device = 0;
  int64_t parameters = 0;
};

inline void append_csv(const std::string& path, const CsvContext& c, const Row& r) {
  using detail::fixed;
  std::FILE* f = std::fopen(path.c_str(), "a");
  EMBER_CHECK(f != nullptr, "dp_vs_ddp: cannot open --csv " << path << " for appending");
  std::fseek(f, 0, SEEK_END);
  if (std::ftell(f) == 0) std::fprintf(f, "%s\n", kCsvHeader);
  std::string mem0, mem_other, mem_all;
  if (!r.peak_mib.empty()) {
    mem0 = fixed(r.peak_mib[0], 1);
    if (r.peak_mib.size() > 1) mem_other = fixed(*std::max_element(r.peak_mib.begin() + 1, r.peak_mib.end()), 1);
    mem_all = detail::joined(r.peak_mib, ";");
  }
  std::string sync, no_sync, allreduce, hidden;
  if (r.ddp) {
    sync = fixed(r.ddp->sync_ms, 3);
    no_sync = fixed(r.ddp->no_sync_ms, 3);
    allreduce = fixed(r.ddp->allreduce_ms, 3);
    if (r.ddp->hidden()) hidden = fixed(*r.ddp->hidden(), 3);
  }
  std::fprintf(f, "ember,%s,%s,%lld,%s,%s,%d,%s,%lld,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n", c.model.c_str(),
               c.model_shape.c_str(), static_cast<long long>(c.parameters), r.mode.c_str(), r.precision.c_str(),
               r.devices, c.hardware.c_str(), static_cast<long long>(c.batch_per_device), c.unit.c_str(),
               fixed(r.throughput, 1).c_str(), fixed(r.efficiency, 3).c_str(), fixed(r.median_ms, 3).c_str(),
               fixed(r.p95_ms, 3).c_str(), mem0.c_str(), mem_other.c_str(), mem_all.c_str(), sync.c_str(),
               no_sync.c_str(), allreduce.c_str(), hidden.c_str());
  EMBER_CHECK(std::fclose(f) == 0, "dp_vs_ddp: writing --csv " << path << " failed");
}

}  // namespace ember::bench
