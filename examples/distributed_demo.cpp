// A distributed job in a few lines: started by ember-run (or torchrun,
// mpirun, srun), each rank joins the default process group through the
// env:// variables and runs a loop of all_reduce steps on the CPU.
//
//   ember-run --standalone --nproc-per-node 4 build/examples/distributed_demo --steps 5
//
// Flags: --steps N (default 3); --fail-rank R --fail-step S make rank R exit
// with status 3 at step S, as a crash would, to show what the others and
// ember-run do then; --timeout-ms T is the collectives' timeout (default
// 30 minutes, as in PyTorch). Exits 0 when every step's sum is right.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "ember/ember.h"
#include "ember/parallel/distributed/init.h"

int main(int argc, char** argv) {
  using namespace ember;
  int steps = 3, fail_rank = -1, fail_step = -1;
  parallel::ProcessGroupOptions options;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    int value = std::atoi(argv[i + 1]);
    if (flag == "--steps") {
      steps = value;
    } else if (flag == "--fail-rank") {
      fail_rank = value;
    } else if (flag == "--fail-step") {
      fail_step = value;
    } else if (flag == "--timeout-ms") {
      options.timeout = std::chrono::milliseconds(value);
    } else {
      std::fprintf(stderr, "unknown flag %s (flags: --steps, --fail-rank, --fail-step, --timeout-ms)\n", argv[i]);
      return 2;
    }
  }
  int rank = -1;
  try {
    parallel::init_process_group("gloo", options);
    rank = parallel::get_rank();
    const int size = parallel::get_world_size();
    std::printf("rank %d of %d joined\n", rank, size);
    for (int step = 0; step < steps; ++step) {
      if (rank == fail_rank && step == fail_step) {
        std::printf("rank %d: simulating a crash at step %d\n", rank, step);
        std::fflush(stdout);
        // The pause lets the others finish the previous step first (exiting
        // with their data unread would reset the connections mid-step), so
        // that they all fail this step's all_reduce, waiting for this rank.
        usleep(300 * 1000);
        _exit(3);
      }
      // Rank r contributes r + step; the sum over the ranks is known.
      Tensor t = full({4}, double(rank + step));
      parallel::all_reduce(t);
      const float want = float(size * (size - 1) / 2 + size * step);
      if (t.max().item<float>() != want || t.min().item<float>() != want) {
        std::printf("rank %d: step %d: all_reduce gave %s, expected %g everywhere\n", rank, step, t.str().c_str(),
                    want);
        return 1;
      }
      if (rank == 0) std::printf("step %d: all_reduce sum = %g\n", step, want);
    }
    parallel::barrier();
    parallel::destroy_process_group();
    std::printf("rank %d: done\n", rank);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    return 1;
  }
}
