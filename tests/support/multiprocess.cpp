// run_ranks (tests/support/multiprocess.h): fork, report through pipes,
// release all ranks together, reap every child.
#include "support/multiprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <thread>

#include "ember/core/cuda/device.h"

namespace ember::testing {

namespace {

using Clock = std::chrono::steady_clock;

void write_all(int fd, const void* data, size_t size) {
  auto* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the parent is gone; nothing left to tell
    p += n;
    size -= size_t(n);
  }
}

[[noreturn]] void child_exit(int code) {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  _exit(code);
}

// The body of one rank; never returns. Reports [passed u8][length u32][message]
// on `report_fd`, then waits until the parent closes the release pipe.
[[noreturn]] void run_child(int rank, int world_size, int port, int port_fd, int report_fd, int release_fd,
                            const std::function<void(RankContext&)>& body, const RunOptions& options) {
  bool passed = false;
  std::string message;
  RankContext ctx;
  ctx.rank = rank;
  ctx.world_size = world_size;
  try {
    if (rank == 0) {
      ctx.store = std::make_shared<parallel::TCPStore>(
          "127.0.0.1", 0, parallel::TCPStoreOptions{.is_server = true, .timeout = options.store_timeout});
      int32_t bound = ctx.store->port();
      write_all(port_fd, &bound, sizeof(bound));
    } else {
      ctx.store = std::make_shared<parallel::TCPStore>("127.0.0.1", port,
                                                       parallel::TCPStoreOptions{.timeout = options.store_timeout});
    }
    body(ctx);
    passed = !::testing::Test::HasFailure();
  } catch (const std::exception& e) {
    message = e.what();
  }
  if (port_fd >= 0) ::close(port_fd);
  uint8_t ok = passed ? 1 : 0;
  uint32_t len = uint32_t(message.size());
  write_all(report_fd, &ok, 1);
  write_all(report_fd, &len, 4);
  write_all(report_fd, message.data(), message.size());
  char byte;
  while (true) {  // until EOF: the parent has every report
    ssize_t n = ::read(release_fd, &byte, 1);
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  ctx.store.reset();
  child_exit(passed ? 0 : 1);
}

struct Child {
  pid_t pid = -1;
  int report_fd = -1;
  std::string report;  // bytes received
  bool reaped = false;
};

void record_status(RankResult& r, int status) {
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
}

// Reads what a child has sent; true once its report is complete.
bool read_report(Child& c, RankResult& r) {
  char buf[4096];
  while (c.report_fd >= 0) {
    ssize_t n = ::read(c.report_fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n <= 0) {
      ::close(c.report_fd);
      c.report_fd = -1;
      break;
    }
    c.report.append(buf, size_t(n));
  }
  if (!r.reported && c.report.size() >= 5) {
    uint32_t len;
    std::memcpy(&len, c.report.data() + 1, 4);
    if (c.report.size() >= 5 + size_t(len)) {
      r.reported = true;
      r.passed = c.report[0] == 1;
      r.message = c.report.substr(5, len);
    }
  }
  return r.reported;
}

}  // namespace

std::vector<RankResult> run_ranks(int world_size, const std::function<void(RankContext&)>& body,
                                  const RunOptions& options) {
  const auto start = Clock::now();
  const auto deadline = start + options.deadline;
  auto ms_since_start = [&] { return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start); };
  std::vector<RankResult> results(world_size);
  std::vector<Child> children(world_size);
  int release[2];
  int port_pipe[2];
  if (::pipe2(release, O_CLOEXEC) != 0 || ::pipe2(port_pipe, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2: " << std::strerror(errno);
    return results;
  }
  int port = -1;
  for (int r = 0; r < world_size; ++r) {
    results[r].rank = r;
    int report[2];
    if (::pipe2(report, O_CLOEXEC) != 0) {
      ADD_FAILURE() << "pipe2: " << std::strerror(errno);
      break;
    }
    std::fflush(nullptr);
    std::cout.flush();
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(release[1]);
      ::close(report[0]);
      ::close(port_pipe[0]);
      if (r != 0) ::close(port_pipe[1]);
      run_child(r, world_size, port, r == 0 ? port_pipe[1] : -1, report[1], release[0], body, options);
    }
    ::close(report[1]);
    if (pid < 0) {
      ADD_FAILURE() << "fork: " << std::strerror(errno);
      ::close(report[0]);
      break;
    }
    children[r].pid = pid;
    children[r].report_fd = report[0];
    fcntl(report[0], F_SETFL, O_NONBLOCK);
    if (r == 0) {
      ::close(port_pipe[1]);
      int32_t bound = -1;
      pollfd p{port_pipe[0], POLLIN, 0};
      int left = int(
          std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count()));
      if (::poll(&p, 1, left) == 1 && ::read(port_pipe[0], &bound, sizeof(bound)) == sizeof(bound)) port = bound;
      if (port <= 0) break;  // rank 0 could not serve the store: the others cannot start
    }
  }
  ::close(port_pipe[0]);
  ::close(release[0]);

  auto all_settled = [&] {
    for (int r = 0; r < world_size; ++r)
      if (children[r].pid > 0 && !results[r].reported && !children[r].reaped) return false;
    return true;
  };
  auto reap = [&](bool block) {
    for (int r = 0; r < world_size; ++r) {
      Child& c = children[r];
      if (c.pid <= 0 || c.reaped) continue;
      int status = 0;
      pid_t got = ::waitpid(c.pid, &status, block ? 0 : WNOHANG);
      if (got == c.pid) {
        c.reaped = true;
        record_status(results[r], status);
        read_report(c, results[r]);
        if (!results[r].reported) results[r].elapsed = ms_since_start();
      }
    }
  };
  // Reports and exits until every rank has finished its body or ended.
  while (!all_settled() && Clock::now() < deadline) {
    std::vector<pollfd> fds;
    for (const Child& c : children)
      if (c.report_fd >= 0) fds.push_back({c.report_fd, POLLIN, 0});
    ::poll(fds.data(), fds.size(), 10);
    for (int r = 0; r < world_size; ++r) {
      bool before = results[r].reported;
      if (children[r].pid > 0 && read_report(children[r], results[r]) && !before) results[r].elapsed = ms_since_start();
    }
    reap(false);
  }
  ::close(release[1]);  // every rank may exit now
  // Ranks that reported exit right after the release; the grace keeps them
  // from being counted as hung when a hung rank used up the deadline.
  const auto exit_deadline = std::max(deadline, Clock::now() + std::chrono::seconds(5));
  while (Clock::now() < exit_deadline) {
    reap(false);
    bool all_reaped = true;
    for (const Child& c : children) all_reaped = all_reaped && (c.pid <= 0 || c.reaped);
    if (all_reaped) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int r = 0; r < world_size; ++r) {
    if (children[r].pid > 0 && !children[r].reaped) {
      results[r].hit_deadline = true;
      ::kill(children[r].pid, SIGKILL);
    }
  }
  reap(true);
  for (Child& c : children)
    if (c.report_fd >= 0) ::close(c.report_fd);
  return results;
}

::testing::AssertionResult all_passed(const std::vector<RankResult>& results) {
  std::ostringstream os;
  bool ok = true;
  for (const RankResult& r : results) {
    if (r.passed && r.exit_code == 0) continue;
    ok = false;
    os << "\n  rank " << r.rank << ": ";
    if (r.hit_deadline) {
      os << "still running at the deadline, killed";
    } else if (r.reported && !r.message.empty()) {
      os << "threw: " << r.message;
    } else if (r.reported) {
      os << "gtest failures (see that rank's output above)";
    } else if (r.signal) {
      os << "killed by signal " << r.signal << " before finishing";
    } else {
      os << "exited with status " << r.exit_code << " before finishing";
    }
  }
  if (ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "not every rank passed:" << os.str();
}

int gpus_visible_to_forks() {
  static const int count = [] {
    const pid_t pid = ::fork();
    if (pid == 0) {
      // device_count() is cached: if this process counted already, the child
      // gets the count without touching CUDA, so the child uses a device to
      // find out whether CUDA works in a fork at all.
      int n = 0;
      try {
        n = std::min(cuda::device_count(), 100);
        if (n > 0) cuda::synchronize(0);
      } catch (...) {
        n = 0;
      }
      _exit(n);
    }
    int status = 0;
    if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return 0;
    return WEXITSTATUS(status);
  }();
  return count;
}

}  // namespace ember::testing
