// Where this process sits in a distributed job, read from the variables its
// launcher set: ember-run and torchrun (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), mpirun of Open MPI
// (OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}), or SLURM's srun
// (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, and SLURM_NTASKS_PER_NODE or
// SLURM_[STEP_]TASKS_PER_NODE with SLURM_NODEID).
//
// Contract:
// - The first family present wins, in that order: RANK (or WORLD_SIZE)
//   set means the torchrun variables, else OMPI_COMM_WORLD_RANK the Open MPI
//   ones, else SLURM_PROCID SLURM's. An empty variable counts as unset.
// - Within the torchrun family RANK and WORLD_SIZE are required; LOCAL_RANK
//   and LOCAL_WORLD_SIZE default to RANK and WORLD_SIZE (one node), as a
//   single-node setup written by hand expects.
// - MASTER_ADDR and MASTER_PORT always come from those two variables; under
//   SLURM a missing MASTER_ADDR is the first host of the step's (else the
//   job's) node list, which is where SLURM starts task 0. Neither mpirun nor
//   srun sets MASTER_PORT.
// - A missing or garbled variable (not an integer, out of range, rank >=
//   world size) is an ember::Error naming the variable, its value and which
//   launcher sets it.
// - Who serves the store at MASTER_ADDR:MASTER_PORT: ember-run's launcher
//   when EMBER_AGENT_STORE=1 (ember-run sets it), torchrun's agent when
//   TORCHELASTIC_USE_AGENT_STORE=True (torchrun sets it, with
//   TORCHELASTIC_RESTART_COUNT), else rank 0 (mpirun, srun, variables set by
//   hand). EMBER_AGENT_STORE wins when both are set.
#pragma once

#include <string>

namespace ember::parallel {

// Who serves the job's TCPStore.
enum class StoreHost {
  Rank0,          // rank 0's process, from a thread (plain env://, mpirun, srun)
  EmberRun,       // ember-run, the launcher (node rank 0's in a multi-node job)
  TorchrunAgent,  // torchrun's elastic agent: a PyTorch TCPStore (parallel/distributed/store/torch_store_client.h)
};

struct RankInfo {
  int rank = 0;  // 0 <= rank < world_size
  int world_size = 1;
  int local_rank = 0;        // this process's index on its node: its GPU
  int local_world_size = 1;  // processes on this node
  std::string master_addr;   // host of rank 0, which serves the TCPStore
  int master_port = 0;
  std::string launcher;  // whose variables these were: "ember-run/torchrun", "mpirun (Open MPI)", "srun (SLURM)"
  StoreHost store_host = StoreHost::Rank0;
  int restart_count = 0;  // TORCHELASTIC_RESTART_COUNT under torchrun's agent
};

RankInfo rank_info_from_env();

namespace detail {
// The first host of a SLURM node list: "gpu[03-05,9],cpu1" -> "gpu03".
std::string first_slurm_host(const std::string& nodelist);
// The task count of node `node` in SLURM_TASKS_PER_NODE's notation:
// "2(x3),1" is 2, 2, 2, 1. An ember::Error naming `variable` when the text
// is garbled or the list has no entry `node`.
int slurm_tasks_on_node(const std::string& tasks_per_node, int node, const char* variable);
}  // namespace detail

}  // namespace ember::parallel
