// ember-run: starts the ranks of a distributed job on this node, one process
// per GPU, with the env:// variables set, and supervises them.
//
//   ember-run --nproc-per-node 4 ./train --epochs 10             # one node, port 29500
//   ember-run --standalone --nproc-per-node 4 ./train            # one node, a free port
//   ember-run --nnodes 2 --node-rank 0 --nproc-per-node 8 --master-addr 10.0.0.1 ./train  # node 0
//   ember-run --nnodes 2 --node-rank 1 --nproc-per-node 8 --master-addr 10.0.0.1 ./train  # node 1
//
// Contract:
// - Rank RANK = node_rank * nproc_per_node + LOCAL_RANK of WORLD_SIZE =
//   nnodes * nproc_per_node gets RANK, LOCAL_RANK, WORLD_SIZE,
//   LOCAL_WORLD_SIZE, GROUP_RANK (the node rank), MASTER_ADDR and
//   MASTER_PORT in its environment, as from torchrun, and /dev/null as stdin.
// - ember-run serves the job's TCPStore (ember/parallel/distributed/store/tcp_store.h)
//   on MASTER_ADDR:MASTER_PORT from a thread of its own, on node rank 0 only,
//   as torchrun's agent does, and sets EMBER_AGENT_STORE=1 so that the ranks
//   connect to it as clients (rank 0 does not serve one): a rank that dies,
//   rank 0 included, does not take the store with it, so the others can
//   still name the rank that is missing. It listens before starting any
//   rank; a port it cannot listen on is an ember::Error naming it.
//   --standalone listens on a free port of 127.0.0.1.
//   TORCHELASTIC_USE_AGENT_STORE is removed from the ranks' environment.
// - Every line a rank writes to stdout (stderr) comes out on ember-run's
//   stdout (stderr) as "[rank K] line"; a last line without a newline gets
//   one. Lines are never interleaved with each other.
// - SIGINT, SIGTERM and SIGHUP sent to ember-run are forwarded to every
//   rank (a second SIGINT sends SIGKILL); ember-run then exits with
//   128 + the signal's number.
// - When a rank fails (exits non-zero or is killed by a signal), the others
//   get SIGTERM and, after the grace period, SIGKILL; ember-run exits with
//   the first failing rank's status (its exit code, or 128 + signal).
//   Otherwise it exits 0 when every rank has exited 0.
// - Each rank runs in a process group of its own, which ember-run kills when
//   it stops the rank and once every rank has exited, so that no process a
//   rank started is left behind. Every rank is reaped (no zombies), and a
//   rank gets SIGKILL should ember-run itself die (PR_SET_PDEATHSIG).
// - Bad arguments are a LauncherUsageError (ember-run prints it with the
//   usage and exits 2); a program that cannot be executed makes its rank
//   exit 127 after saying so on its stderr.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "ember/core/error.h"

namespace ember::parallel {

class LauncherUsageError : public Error {
 public:
  explicit LauncherUsageError(const std::string& message) : Error(message) {}
};

struct LauncherOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool standalone = false;                                           // one node; 127.0.0.1 and a free port
  std::chrono::milliseconds grace_period = std::chrono::seconds(5);  // SIGTERM to SIGKILL
  bool help = false;                                                 // --help: print launcher_usage() and run nothing
  std::vector<std::string> command;                                  // the program and its arguments
};

// Parses ember-run's arguments (argv without argv[0]); options end at the
// first argument that is not one (or after "--"): that is the program, and
// everything after it is the program's.
LauncherOptions parse_launcher_args(const std::vector<std::string>& args);
std::string launcher_usage();

// Runs the ranks until they have all exited; returns ember-run's exit status.
int run_launcher(const LauncherOptions& options);

}  // namespace ember::parallel
