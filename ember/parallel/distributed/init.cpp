// The backend table and the default process group (ember/parallel/distributed/init.h).
#include "ember/parallel/distributed/init.h"

#include <algorithm>
#include <mutex>

#include "ember/core/error.h"
#include "ember/parallel/distributed/store/prefix_store.h"
#include "ember/parallel/distributed/store/tcp_store.h"
#include "ember/parallel/distributed/store/torch_store_client.h"
#if EMBER_WITH_GLOO
#include "ember/parallel/distributed/backend/gloo_process_group.h"
#endif
#if EMBER_WITH_CUDA
#include "ember/parallel/distributed/backend/nccl_process_group.h"
#endif

namespace ember::parallel {

namespace {

std::mutex default_mutex;
std::shared_ptr<ProcessGroup> default_pg;

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + names[i];
  return names.empty() ? "none" : out;
}

// This host's address on the connection to the TCP store under a chain of
// PrefixStores (ember's or torchrun's); empty for any other store.
std::string store_local_address(const Store* store) {
  while (auto* prefix = dynamic_cast<const PrefixStore*>(store)) store = prefix->underlying().get();
  if (auto* tcp = dynamic_cast<const TCPStore*>(store)) return tcp->local_address();
  if (auto* torch = dynamic_cast<const TorchStoreClient*>(store)) return torch->local_address();
  return "";
}

std::shared_ptr<ProcessGroup> require_default(const char* caller) {
  std::lock_guard<std::mutex> lock(default_mutex);
  EMBER_CHECK(default_pg,
              caller << ": there is no default process group; call parallel::init_process_group(\"gloo\") "
                     << "first (it reads RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, which ember-run sets)");
  return default_pg;
}

// Call with default_mutex held.
void check_no_default() {
  EMBER_CHECK(!default_pg, "init_process_group: the default process group exists already ("
                               << default_pg->backend() << ", rank " << default_pg->rank() << " of "
                               << default_pg->size() << "); call destroy_process_group() first");
}

void set_default(std::shared_ptr<ProcessGroup> group) {
  std::lock_guard<std::mutex> lock(default_mutex);
  check_no_default();
  default_pg = std::move(group);
}

void check_not_initialized() {
  std::lock_guard<std::mutex> lock(default_mutex);
  check_no_default();
}

void check_backend(const std::string& backend) {
#if !EMBER_WITH_GLOO
  EMBER_CHECK(backend != "gloo",
              "process group: this ember was built without Gloo, so it has no gloo backend. "
              "Install Gloo (apt-get install libgloo-dev) and configure again "
              "(cmake -DEMBER_WITH_GLOO=ON)");
#endif
#if !EMBER_WITH_CUDA
  EMBER_CHECK(backend != "nccl",
              "process group: this ember was built without CUDA (EMBER_WITH_CUDA=OFF), so it has no "
              "nccl backend. Use the gloo backend for CPU tensors, or build ember with the CUDA "
              "toolkit and NCCL (apt-get install libnccl-dev) for GPUs");
#endif
  EMBER_CHECK(backend_available(backend),
              "process group: unknown backend '" << backend << "'; this build has: " << joined(available_backends()));
}

// The job's store, from whoever serves it (RankInfo::store_host).
std::shared_ptr<Store> store_from_env(const RankInfo& info, std::chrono::milliseconds timeout) {
  if (info.store_host == StoreHost::TorchrunAgent) {
    // torch's env:// rendezvous gives its workers this view of the agent's store.
    return std::make_shared<PrefixStore>(
        "/worker/attempt_" + std::to_string(info.restart_count),
        std::make_shared<TorchStoreClient>(info.master_addr, info.master_port, timeout));
  }
  if (info.store_host == StoreHost::EmberRun) {
    return std::make_shared<TCPStore>(info.master_addr, info.master_port,
                                      TCPStoreOptions{.server = "ember-run", .timeout = timeout});
  }
  return std::make_shared<TCPStore>(info.master_addr, info.master_port,
                                    TCPStoreOptions{.is_server = info.rank == 0, .timeout = timeout});
}

}  // namespace

std::vector<std::string> available_backends() {
  std::vector<std::string> out;
#if EMBER_WITH_GLOO
  out.push_back("gloo");
#endif
#if EMBER_WITH_CUDA
  out.push_back("nccl");
#endif
  return out;
}

bool backend_available(const std::string& backend) {
  std::vector<std::string> all = available_backends();
  return std::find(all.begin(), all.end(), backend) != all.end();
}

std::shared_ptr<ProcessGroup> new_group(const std::string& backend, const std::shared_ptr<Store>& store, int rank,
                                        int size, const ProcessGroupOptions& options) {
  check_backend(backend);
#if EMBER_WITH_GLOO
  if (backend == "gloo") {
    ProcessGroupOptions o = options;
    if (o.gloo_hostname.empty() && o.gloo_interface.empty()) {
      o.gloo_hostname = store_local_address(store.get());
    }
    return std::make_shared<GlooProcessGroup>(store, rank, size, o);
  }
#endif
#if EMBER_WITH_CUDA
  if (backend == "nccl") return std::make_shared<NcclProcessGroup>(store, rank, size, options);
#endif
  EMBER_FAIL("process group: backend '" << backend << "' has no constructor (an ember bug)");
}

void init_process_group(const std::string& backend, const ProcessGroupOptions& options) {
  check_not_initialized();
  check_backend(backend);  // before the store: a wrong name should not make rank 0 listen
  RankInfo info = rank_info_from_env();
  set_default(new_group(backend, store_from_env(info, options.timeout), info.rank, info.world_size, options));
}

void init_process_group(const std::string& backend, const std::shared_ptr<Store>& store, int rank, int world_size,
                        const ProcessGroupOptions& options) {
  check_not_initialized();
  set_default(new_group(backend, store, rank, world_size, options));
}

bool is_initialized() {
  std::lock_guard<std::mutex> lock(default_mutex);
  return default_pg != nullptr;
}

std::shared_ptr<ProcessGroup> default_group() { return require_default("parallel::default_group"); }

int get_rank() { return require_default("parallel::get_rank")->rank(); }

int get_world_size() { return require_default("parallel::get_world_size")->size(); }

void destroy_process_group() {
  std::shared_ptr<ProcessGroup> group;
  {
    std::lock_guard<std::mutex> lock(default_mutex);
    EMBER_CHECK(default_pg,
                "destroy_process_group: there is no default process group (never initialized, or "
                "destroyed already)");
    group = std::move(default_pg);
  }
  // Destroyed outside the lock: a group waits for its queued collectives.
}

void all_reduce(const Tensor& tensor, ReduceOp op) {
  require_default("parallel::all_reduce")->all_reduce(tensor, op)->wait();
}

void broadcast(const Tensor& tensor, int root) {
  require_default("parallel::broadcast")->broadcast(tensor, root)->wait();
}

void all_gather(const TensorList& outputs, const Tensor& input) {
  require_default("parallel::all_gather")->all_gather(outputs, input)->wait();
}

void reduce_scatter(const Tensor& output, const TensorList& inputs, ReduceOp op) {
  require_default("parallel::reduce_scatter")->reduce_scatter(output, inputs, op)->wait();
}

void barrier() { require_default("parallel::barrier")->barrier()->wait(); }

}  // namespace ember::parallel
