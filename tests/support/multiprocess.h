// Runs a test body in several processes, one per rank, as a distributed job
// would, for the tests of parallel/.
//
//   auto results = run_ranks(4, [](RankContext& ctx) {
//     auto group = new_group("gloo", ctx.store, ctx.rank, ctx.world_size, {.timeout = 2s});
//     ...EXPECT_EQ(...) as usual...
//   });
//   EXPECT_TRUE(all_passed(results));
//
// Contract:
// - Each rank is a fork() of the test process (ctest runs every test in a
//   process of its own, so no other thread exists to be lost in the child).
//   Rank 0 makes a TCPStore on a free port of 127.0.0.1 and serves it; the
//   others connect to it. ctx.store lives until every rank has finished, so
//   rank 0's server outlives the others' use of it.
// - A rank passes when the body returns without an exception and without a
//   gtest failure in that process (the failure text is printed by the child
//   as usual). An exception's message comes back in RankResult::message.
// - A body may end its process itself (_exit) to play a crashed rank; its
//   exit status is reported.
// - Nothing can hang: after `deadline` every rank still running is killed
//   with SIGKILL and reported as such; every child is reaped.
// - The ranks may use CUDA only when this process has not: see
//   gpus_visible_to_forks() below.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ember/parallel/distributed/store/tcp_store.h"

namespace ember::testing {

struct RankContext {
  int rank = 0;
  int world_size = 1;
  std::shared_ptr<parallel::TCPStore> store;
};

struct RankResult {
  int rank = 0;
  bool reported = false;                 // the body returned or threw (else the process ended on its own or was killed)
  bool passed = false;                   // returned with no exception and no gtest failure
  std::string message;                   // the exception's text, if it threw
  int exit_code = -1;                    // when it exited: its status
  int signal = 0;                        // when a signal ended it
  bool hit_deadline = false;             // killed by run_ranks at the deadline
  std::chrono::milliseconds elapsed{0};  // from the start of run_ranks to the body's end or the process's
};

struct RunOptions {
  std::chrono::milliseconds deadline = std::chrono::seconds(60);
  std::chrono::milliseconds store_timeout = std::chrono::seconds(20);
};

std::vector<RankResult> run_ranks(int world_size, const std::function<void(RankContext&)>& body,
                                  const RunOptions& options = {});

// Passes when every rank passed; otherwise lists what each failing rank did.
::testing::AssertionResult all_passed(const std::vector<RankResult>& results);

// The CUDA devices a forked child can use: counted in a child, which also
// uses device 0, so 0 when this process initialized CUDA before (CUDA does
// not survive a fork) or the build has no CUDA. A test that forks ranks
// which use CUDA must not initialize it in its own process, not even to
// count the devices (cuda::device_count() would): this counts them without
// that. Computed once per process.
int gpus_visible_to_forks();

}  // namespace ember::testing
