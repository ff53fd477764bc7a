// ember-train's distributed mode: the launcher's variables, the backend
// for the device, the default process group.
#include "examples/train/distributed.h"

#include <cstdlib>

#include "ember/core/cuda/device.h"
#include "ember/core/ops.h"
#include "ember/parallel/distributed/init.h"
#include "ember/parallel/distributed/rank_env.h"

namespace ember::train {
namespace {

bool set(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0';
}

}  // namespace

Distributed start_distributed(const Options& o) {
  Distributed d;
  d.device = o.device;
  const bool launched = set("RANK") || set("WORLD_SIZE") || set("OMPI_COMM_WORLD_RANK") || set("SLURM_PROCID");
  if (!o.distributed && !launched) return d;
  parallel::RankInfo info;
  try {
    info = parallel::rank_info_from_env();
  } catch (const Error& e) {
    if (!launched) throw UsageError(std::string("--distributed: ") + e.what());
    throw;
  }
  if (info.world_size == 1 && !o.distributed) return d;  // one rank: a plain run
  d.enabled = true;
  d.rank = info.rank;
  d.world_size = info.world_size;
  if (o.device.is_cuda()) {
    if (!parallel::backend_available("nccl")) {
      throw UsageError("distributed training on " + o.device.str() +
                       " needs the NCCL backend, which this build of ember lacks (it is built without CUDA); "
                       "train with --device cpu (the gloo backend)");
    }
    d.backend = "nccl";
    EMBER_CHECK(info.local_rank < cuda::device_count(),
                "ember-train: rank " << info.rank << " is local rank " << info.local_rank << " but only "
                                     << cuda::device_count() << " CUDA devices are visible; start at most that many "
                                     << "ranks per node");
    d.device = cuda_device(info.local_rank);
    cuda::set_device(info.local_rank);  // one GPU per rank: local rank k trains on cuda:k
  } else {
    d.backend = "gloo";
  }
  parallel::ProcessGroupOptions pg;
  pg.timeout = o.dist_timeout;
  if (d.device.is_cuda()) pg.nccl_device = d.device.index;
  parallel::init_process_group(d.backend, pg);
  d.group = parallel::default_group();
  return d;
}

void Distributed::sum(std::vector<double>& values) const {
  if (!enabled || values.empty()) return;
  Tensor t = from_vector<double>(values).to(device);
  group->all_reduce(t)->wait();
  values = to_vector<double>(t.cpu());
}

void Distributed::finish() {
  if (!enabled) return;
  group->barrier()->wait();
  group.reset();
  parallel::destroy_process_group();
}

}  // namespace ember::train
