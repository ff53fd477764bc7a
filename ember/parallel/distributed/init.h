// Starting distributed training: the default process group, as PyTorch's
// torch.distributed has it, and groups of one's own.
//
//   // ember-run --nproc-per-node 4 ./train   (or torchrun, mpirun, srun)
//   parallel::init_process_group("gloo");              // env:// : the launcher's variables
//   parallel::all_reduce(loss, parallel::ReduceOp::Avg);
//   parallel::barrier();
//   parallel::destroy_process_group();
//
// Contract:
// - init_process_group(backend) reads RankInfo from the environment
//   (ember/parallel/distributed/rank_env.h), connects to the TCPStore on
//   MASTER_ADDR:MASTER_PORT with the group's timeout (served by ember-run,
//   by torchrun's agent, through PyTorch's protocol under the prefix
//   /worker/attempt_<TORCHELASTIC_RESTART_COUNT>, or by rank 0 when no
//   launcher serves one: RankInfo::store_host), and makes the default group
//   over it. It returns when every rank has joined; after the timeout it
//   throws, naming the ranks that did not.
// - The other form takes a store, rank and world size (no environment).
// - Backends: "gloo" (CPU tensors) when ember was built with Gloo, "nccl"
//   (CUDA tensors, one GPU per rank: ember/parallel/distributed/backend/nccl_process_group.h) when it
//   was built with CUDA. An unknown backend, or one this build lacks, is an
//   ember::Error that lists the available ones and says how to get the
//   missing one.
// - The gloo transport listens on the address through which this host
//   reaches the TCPStore (the interface the other ranks reach it by), unless
//   ProcessGroupOptions or GLOO_SOCKET_IFNAME say otherwise.
// - One default group per process: initializing twice is an error, as is
//   using it before init_process_group or after destroy_process_group.
//   Where rank 0 serves the store, end with barrier() before
//   destroy_process_group() so that rank 0 does not leave while others still
//   need it.
// - The free collectives below run on the default group and wait for their
//   result (PyTorch's async_op=False): with nccl, the caller's current CUDA
//   stream waits for it, not the host (Work::wait()'s rule). For overlap use
//   the group's own asynchronous methods (default_group()->all_reduce(t)
//   returns a Work).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ember/parallel/distributed/process_group.h"
#include "ember/parallel/distributed/rank_env.h"
#include "ember/parallel/distributed/store/store.h"

namespace ember::parallel {

// The backends this build has: "gloo" with Gloo, "nccl" with CUDA.
std::vector<std::string> available_backends();
bool backend_available(const std::string& backend);

// A new group of `backend` over `store` (made by every rank of it, in the
// same order as its other groups).
std::shared_ptr<ProcessGroup> new_group(const std::string& backend, const std::shared_ptr<Store>& store, int rank,
                                        int size, const ProcessGroupOptions& options = {});

void init_process_group(const std::string& backend, const ProcessGroupOptions& options = {});
void init_process_group(const std::string& backend, const std::shared_ptr<Store>& store, int rank, int world_size,
                        const ProcessGroupOptions& options = {});
bool is_initialized();
std::shared_ptr<ProcessGroup> default_group();
int get_rank();
int get_world_size();
// Drops the default group (and, on rank 0 after env:// init, the store it serves).
void destroy_process_group();

void all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::Sum);
void broadcast(const Tensor& tensor, int root = 0);
void all_gather(const TensorList& outputs, const Tensor& input);
void reduce_scatter(const Tensor& output, const TensorList& inputs, ReduceOp op = ReduceOp::Sum);
void barrier();

}  // namespace ember::parallel
