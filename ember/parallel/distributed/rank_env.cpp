// rank_info_from_env (ember/parallel/distributed/rank_env.h): the launcher variables, checked.
#include "ember/parallel/distributed/rank_env.h"

#include <charconv>
#include <cstdlib>
#include <optional>

#include "ember/core/error.h"

namespace ember::parallel {

namespace {

constexpr const char* kTorchrun = "ember-run/torchrun";
constexpr const char* kOpenMpi = "mpirun (Open MPI)";
constexpr const char* kSlurm = "srun (SLURM)";

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

// The integer in `text` if it is one within [lo, hi].
std::optional<long long> to_int(const std::string& text, long long lo, long long hi) {
  long long v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < lo || v > hi) return std::nullopt;
  return v;
}

int int_var(const char* name, const std::string& value, long long lo, long long hi, const char* launcher) {
  std::optional<long long> v = to_int(value, lo, hi);
  EMBER_CHECK(v, "env:// initialization: " << name << "='" << value << "' (set for " << launcher
                                           << ") is not an integer in [" << lo << ", " << hi << "]");
  return int(*v);
}

int required_int(const char* name, long long lo, long long hi, const char* launcher, const char* hint) {
  std::optional<std::string> v = env(name);
  EMBER_CHECK(v, "env:// initialization: " << name << " is not set, but the other variables are those of " << launcher
                                           << ", which sets it. " << hint);
  return int_var(name, *v, lo, hi, launcher);
}

constexpr long long kMaxRanks = 1 << 24;

void check_ranks(const RankInfo& info, const char* rank_var, const char* size_var, const char* local_var,
                 const char* local_size_var) {
  EMBER_CHECK(info.rank < info.world_size, "env:// initialization: " << rank_var << "=" << info.rank << " is not below "
                                                                     << size_var << "=" << info.world_size << " ("
                                                                     << info.launcher << ")");
  EMBER_CHECK(info.local_rank < info.local_world_size,
              "env:// initialization: " << local_var << "=" << info.local_rank << " is not below " << local_size_var
                                        << "=" << info.local_world_size << " (" << info.launcher << ")");
  EMBER_CHECK(info.local_world_size <= info.world_size,
              "env:// initialization: " << local_size_var << "=" << info.local_world_size << " is larger than "
                                        << size_var << "=" << info.world_size << " (" << info.launcher << ")");
}

const char* kStartHint =
    "Start the program with ember-run (ember-run --nproc-per-node N program args...), torchrun, mpirun or srun, "
    "or set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT yourself";

}  // namespace

namespace detail {

std::string first_slurm_host(const std::string& nodelist) {
  // The first entry ends at the first comma outside brackets.
  size_t end = 0;
  int depth = 0;
  for (; end < nodelist.size(); ++end) {
    if (nodelist[end] == '[') ++depth;
    if (nodelist[end] == ']') --depth;
    if (nodelist[end] == ',' && depth == 0) break;
  }
  std::string entry = nodelist.substr(0, end);
  size_t open = entry.find('[');
  if (open == std::string::npos) return entry;
  size_t close = entry.find(']', open);
  EMBER_CHECK(close != std::string::npos,
              "env:// initialization: cannot read the SLURM node list '" << nodelist << "' (unclosed '[')");
  // "03-05,9" -> "03": the first range's start keeps its zero padding.
  std::string ranges = entry.substr(open + 1, close - open - 1);
  size_t stop = ranges.find_first_of("-,");
  return entry.substr(0, open) + ranges.substr(0, stop) + entry.substr(close + 1);
}

int slurm_tasks_on_node(const std::string& tasks_per_node, int node, const char* variable) {
  int index = 0;
  size_t pos = 0;
  while (pos <= tasks_per_node.size()) {
    size_t comma = tasks_per_node.find(',', pos);
    std::string item = tasks_per_node.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    // "N" or "N(xR)": N tasks on each of R nodes.
    size_t paren = item.find("(x");
    std::optional<long long> count = to_int(item.substr(0, paren), 0, kMaxRanks);
    std::optional<long long> repeat = 1;
    if (paren != std::string::npos) {
      repeat =
          item.back() == ')' ? to_int(item.substr(paren + 2, item.size() - paren - 3), 1, kMaxRanks) : std::nullopt;
    }
    EMBER_CHECK(count && repeat, "env:// initialization: " << variable << "='" << tasks_per_node
                                                           << "' is not a SLURM task list such as '2(x3),1'");
    if (node < index + *repeat) return int(*count);
    index += int(*repeat);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  EMBER_FAIL("env:// initialization: " << variable << "='" << tasks_per_node << "' lists " << index
                                       << " nodes, but SLURM_NODEID is " << node);
}

}  // namespace detail

RankInfo rank_info_from_env() {
  RankInfo info;
  const char* rank_var;
  const char* size_var;
  const char* local_var;
  const char* local_size_var;
  if (env("RANK") || env("WORLD_SIZE")) {
    info.launcher = kTorchrun;
    rank_var = "RANK";
    size_var = "WORLD_SIZE";
    local_var = "LOCAL_RANK";
    local_size_var = "LOCAL_WORLD_SIZE";
    const char* hint = "Set RANK and WORLD_SIZE together (ember-run sets both).";
    info.world_size = required_int("WORLD_SIZE", 1, kMaxRanks, kTorchrun, hint);
    info.rank = required_int("RANK", 0, kMaxRanks, kTorchrun, hint);
    std::optional<std::string> local = env("LOCAL_RANK");
    std::optional<std::string> local_size = env("LOCAL_WORLD_SIZE");
    info.local_rank = local ? int_var("LOCAL_RANK", *local, 0, kMaxRanks, kTorchrun) : info.rank;
    info.local_world_size =
        local_size ? int_var("LOCAL_WORLD_SIZE", *local_size, 1, kMaxRanks, kTorchrun) : info.world_size;
  } else if (env("OMPI_COMM_WORLD_RANK")) {
    info.launcher = kOpenMpi;
    rank_var = "OMPI_COMM_WORLD_RANK";
    size_var = "OMPI_COMM_WORLD_SIZE";
    local_var = "OMPI_COMM_WORLD_LOCAL_RANK";
    local_size_var = "OMPI_COMM_WORLD_LOCAL_SIZE";
    const char* hint = "Is this Open MPI's mpirun?";
    info.rank = required_int(rank_var, 0, kMaxRanks, kOpenMpi, hint);
    info.world_size = required_int(size_var, 1, kMaxRanks, kOpenMpi, hint);
    info.local_rank = required_int(local_var, 0, kMaxRanks, kOpenMpi, hint);
    info.local_world_size = required_int(local_size_var, 1, kMaxRanks, kOpenMpi, hint);
  } else if (env("SLURM_PROCID")) {
    info.launcher = kSlurm;
    rank_var = "SLURM_PROCID";
    size_var = "SLURM_NTASKS";
    local_var = "SLURM_LOCALID";
    local_size_var = "SLURM_NTASKS_PER_NODE";
    const char* hint = "Start the ranks with srun inside the allocation.";
    info.rank = required_int(rank_var, 0, kMaxRanks, kSlurm, hint);
    info.world_size = required_int(size_var, 1, kMaxRanks, kSlurm, hint);
    info.local_rank = required_int(local_var, 0, kMaxRanks, kSlurm, hint);
    std::optional<std::string> per_node = env("SLURM_NTASKS_PER_NODE");
    // SLURM_NTASKS_PER_NODE exists only with --ntasks-per-node; the task
    // list of the step (or the job) always does.
    if (per_node && to_int(*per_node, 1, kMaxRanks)) {
      info.local_world_size = int_var(local_size_var, *per_node, 1, kMaxRanks, kSlurm);
    } else {
      const char* list_var = env("SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE";
      std::optional<std::string> list = env(list_var);
      EMBER_CHECK(list,
                  "env:// initialization: under srun (SLURM) the tasks per node come from SLURM_NTASKS_PER_NODE "
                  "or SLURM_TASKS_PER_NODE, and neither is set. Start the ranks with srun inside the allocation.");
      int node = required_int("SLURM_NODEID", 0, kMaxRanks, kSlurm, hint);
      info.local_world_size = detail::slurm_tasks_on_node(*list, node, list_var);
      local_size_var = list_var;
    }
  } else {
    EMBER_FAIL(
        "env:// initialization: no launcher variables found: none of RANK (ember-run, torchrun), "
        "OMPI_COMM_WORLD_RANK (mpirun) or SLURM_PROCID (srun) is set. "
        << kStartHint);
  }
  check_ranks(info, rank_var, size_var, local_var, local_size_var);

  std::optional<std::string> addr = env("MASTER_ADDR");
  if (!addr && info.launcher == kSlurm) {
    for (const char* list : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
      if (std::optional<std::string> nodes = env(list)) {
        addr = detail::first_slurm_host(*nodes);
        break;
      }
    }
  }
  EMBER_CHECK(addr,
              "env:// initialization: MASTER_ADDR is not set ("
                  << info.launcher << " gave the ranks). It must name the host of rank 0, the same on every rank"
                  << (info.launcher == kOpenMpi ? ": mpirun -x MASTER_ADDR=<host of rank 0> -x MASTER_PORT=<port>" : "")
                  << ". ember-run and torchrun set it.");
  info.master_addr = *addr;
  std::optional<std::string> port = env("MASTER_PORT");
  EMBER_CHECK(port, "env:// initialization: MASTER_PORT is not set ("
                        << info.launcher << " gave the ranks). It must name a free TCP port on rank 0's host, the same "
                        << "on every rank (e.g. export MASTER_PORT=29500). ember-run and torchrun set it.");
  info.master_port = int_var("MASTER_PORT", *port, 1, 65535, info.launcher.c_str());

  if (env("EMBER_AGENT_STORE") == "1") {
    info.store_host = StoreHost::EmberRun;
  } else if (env("TORCHELASTIC_USE_AGENT_STORE") == "True") {
    info.store_host = StoreHost::TorchrunAgent;
    std::optional<std::string> restarts = env("TORCHELASTIC_RESTART_COUNT");
    info.restart_count = restarts ? int_var("TORCHELASTIC_RESTART_COUNT", *restarts, 0, 1 << 30, "torchrun") : 0;
  }
  return info;
}

}  // namespace ember::parallel
