// ember-run's argument parsing and supervisor (ember/parallel/launcher/launcher.h): fork and
// exec per rank, one poll() loop over the ranks' output pipes and a signalfd
// for SIGCHLD and the forwarded signals.
#include "ember/parallel/launcher/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <sstream>
#include <utility>

#include "ember/core/cuda/device.h"
#include "ember/parallel/distributed/store/socket.h"
#include "ember/parallel/distributed/store/tcp_store_server.h"

extern char** environ;

namespace ember::parallel {

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void usage_error(const std::string& message) { throw LauncherUsageError(message); }

int int_value(const std::string& flag, const std::string& text, int lo, int hi) {
  int v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < lo || v > hi) {
    usage_error(flag + " takes an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + text +
                "'");
  }
  return v;
}

// The normalized name of an option ("--nproc_per_node" -> "--nproc-per-node":
// torchrun accepts both spellings).
std::string option_name(std::string arg) {
  std::replace(arg.begin() + std::min<size_t>(2, arg.size()), arg.end(), '_', '-');
  return arg;
}

void note(const std::string& message) {
  std::string line = "ember-run: " + message + "\n";
  (void)!::write(STDERR_FILENO, line.data(), line.size());
}

void write_all(int fd, const std::string& s) {
  const char* p = s.data();
  size_t left = s.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // our own output is gone (a closed pipe): the ranks run on regardless
    p += n;
    left -= size_t(n);
  }
}

std::string status_text(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  }
  return "ended with wait status " + std::to_string(status);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

bool failed(int status) { return !WIFEXITED(status) || WEXITSTATUS(status) != 0; }

// One output stream of a rank: its pipe and the line it has not finished.
struct Stream {
  int fd = -1;
  int target = -1;  // STDOUT_FILENO or STDERR_FILENO
  std::string pending;
};

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  std::string prefix;  // "[rank 3] "
  Stream out, err;
};

// A line too long to hold is written out in pieces of this size.
constexpr size_t kMaxLine = 64 * 1024;

void emit(Rank& r, Stream& s, const char* data, size_t n, bool eof) {
  s.pending.append(data, n);
  std::string out;
  size_t start = 0;
  while (true) {
    size_t nl = s.pending.find('\n', start);
    if (nl == std::string::npos) {
      if (s.pending.size() - start < kMaxLine && !(eof && s.pending.size() > start)) break;
      nl = std::min(s.pending.size(), start + kMaxLine);
      out += r.prefix + s.pending.substr(start, nl - start) + "\n";
      start = nl;
      continue;
    }
    out += r.prefix + s.pending.substr(start, nl - start + 1);
    start = nl + 1;
  }
  s.pending.erase(0, start);
  if (!out.empty()) write_all(s.target, out);  // one write per batch of whole lines
}

// Reads what is available on a stream; closes it at EOF or on error.
void drain(Rank& r, Stream& s) {
  char buf[16 * 1024];
  while (s.fd >= 0) {
    ssize_t n = ::read(s.fd, buf, sizeof(buf));
    if (n > 0) {
      emit(r, s, buf, size_t(n), false);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    emit(r, s, nullptr, 0, true);
    ::close(s.fd);
    s.fd = -1;
  }
}

// The environment of one rank: this process's, with the launcher's variables replaced.
std::vector<std::string> rank_environment(const LauncherOptions& o, int local_rank) {
  const std::vector<std::pair<std::string, std::string>> vars = {
      {"RANK", std::to_string(o.node_rank * o.nproc_per_node + local_rank)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"WORLD_SIZE", std::to_string(o.nnodes * o.nproc_per_node)},
      {"LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)},
      {"GROUP_RANK", std::to_string(o.node_rank)},
      {"MASTER_ADDR", o.master_addr},
      {"MASTER_PORT", std::to_string(o.master_port)},
      {"EMBER_AGENT_STORE", "1"}};
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string entry = *e;
    std::string name = entry.substr(0, entry.find('='));
    bool replaced = std::any_of(vars.begin(), vars.end(), [&](const auto& v) { return v.first == name; });
    // A torchrun agent's variable, inherited by ember-run, must not send the ranks to torchrun's store.
    if (!replaced && name != "TORCHELASTIC_USE_AGENT_STORE") env.push_back(entry);
  }
  for (const auto& [name, value] : vars) env.push_back(name + "=" + value);
  return env;
}

class Supervisor {
 public:
  explicit Supervisor(LauncherOptions options) : o_(std::move(options)) {}

  int run() {
    sigset_t handled;
    sigemptyset(&handled);
    for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&handled, sig);
    EMBER_CHECK(sigprocmask(SIG_BLOCK, &handled, &old_mask_) == 0, "ember-run: sigprocmask failed");
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ignore, &old_pipe_);  // a closed stdout must not kill the supervisor
    signal_fd_ = signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);
    int result = 1;
    try {
      EMBER_CHECK(signal_fd_ >= 0, "ember-run: signalfd failed: " << detail::errno_text(errno));
      serve_store();
      for (int local = 0; local < o_.nproc_per_node; ++local) spawn(local);
      supervise();
      result = exit_status();
    } catch (...) {
      stop_all(SIGKILL);
      reap_all_blocking();
      store_.reset();
      restore();
      throw;
    }
    store_.reset();
    restore();
    return result;
  }

 private:
  // The job's store lives here, not in rank 0, so that it outlives any rank.
  // Its thread starts with the handled signals blocked, as this thread has
  // them: a SIGCHLD or SIGTERM delivered to it would be lost to the
  // signalfd.
  void serve_store() {
    if (o_.node_rank != 0) return;
    const int port = o_.standalone ? 0 : o_.master_port;
    try {
      store_ = std::make_unique<detail::TCPStoreServer>(o_.master_addr, port);
    } catch (const Error& e) {
      EMBER_FAIL("ember-run: cannot serve the job's store on "
                 << o_.master_addr << ":" << port << ": " << e.what()
                 << ". Another program (an earlier job?) may use the port: pick another --master-port, or use "
                 << "--standalone on one node");
    }
    o_.master_port = store_->port();
  }

  void restore() {
    if (signal_fd_ >= 0) ::close(signal_fd_);
    signal_fd_ = -1;
    sigaction(SIGPIPE, &old_pipe_, nullptr);
    sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
  }

  void spawn(int local) {
    Rank r;
    r.rank = o_.node_rank * o_.nproc_per_node + local;
    r.prefix = "[rank " + std::to_string(r.rank) + "] ";
    // Everything the child needs is built before fork(): the child only
    // makes system calls until exec.
    std::vector<std::string> env = rank_environment(o_, local);
    std::vector<char*> envp, argv;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = o_.command;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::string exec_error = "ember-run: cannot execute '" + args[0] + "': ";
    int out[2], err[2];
    EMBER_CHECK(::pipe2(out, O_CLOEXEC) == 0 && ::pipe2(err, O_CLOEXEC) == 0,
                "ember-run: pipe2 failed: " << detail::errno_text(errno));
    const pid_t launcher = ::getpid();
    pid_t pid = ::fork();
    EMBER_CHECK(pid >= 0, "ember-run: fork failed: " << detail::errno_text(errno));
    if (pid == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != launcher) _exit(1);  // the launcher died before prctl
      sigaction(SIGPIPE, &old_pipe_, nullptr);
      sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
      int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(err[1], STDERR_FILENO);
      ::execvpe(argv[0], argv.data(), envp.data());
      int e = errno;
      const char* why = strerror(e);
      (void)!::write(STDERR_FILENO, exec_error.data(), exec_error.size());
      (void)!::write(STDERR_FILENO, why, strlen(why));
      (void)!::write(STDERR_FILENO, "\n", 1);
      _exit(127);
    }
    ::setpgid(pid, pid);  // also here, so that kill(-pid) works whichever side runs first
    ::close(out[1]);
    ::close(err[1]);
    r.pid = pid;
    r.running = true;
    r.out = {out[0], STDOUT_FILENO, {}};
    r.err = {err[0], STDERR_FILENO, {}};
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(err[0], F_SETFL, O_NONBLOCK);
    ranks_.push_back(std::move(r));
  }

  void signal_groups(int sig, bool running_only) {
    for (Rank& r : ranks_)
      if (r.pid > 0 && (r.running || !running_only)) ::kill(-r.pid, sig);
  }

  void stop_all(int sig) { signal_groups(sig, true); }

  void begin_stopping(int sig) {
    stop_all(sig);
    if (!stopping_) {
      stopping_ = true;
      kill_deadline_ = Clock::now() + o_.grace_period;
    }
  }

  void reap() {
    for (Rank& r : ranks_) {
      if (!r.running) continue;
      int status = 0;
      pid_t got;
      do {
        got = ::waitpid(r.pid, &status, WNOHANG);
      } while (got < 0 && errno == EINTR);
      if (got != r.pid) continue;
      r.running = false;
      r.status = status;
      if (failed(status) && !stopping_) {
        failure_ = &r - ranks_.data();
        note("rank " + std::to_string(r.rank) + " (pid " + std::to_string(r.pid) + ") " + status_text(status) +
             "; stopping the other ranks (SIGTERM, then SIGKILL after " + std::to_string(o_.grace_period.count()) +
             " ms)");
        begin_stopping(SIGTERM);
      }
    }
  }

  void reap_all_blocking() {
    for (Rank& r : ranks_) {
      if (!r.running) continue;
      int status = 0;
      while (::waitpid(r.pid, &status, 0) < 0 && errno == EINTR) {
      }
      r.running = false;
      r.status = status;
    }
  }

  void on_signals() {
    signalfd_siginfo info;
    while (true) {
      ssize_t n = ::read(signal_fd_, &info, sizeof(info));
      if (n < 0 && errno == EINTR) continue;
      if (n != ssize_t(sizeof(info))) return;
      int sig = int(info.ssi_signo);
      if (sig == SIGCHLD) {
        reap();
        continue;
      }
      if (sig == SIGINT && received_ == SIGINT) {
        note("second SIGINT: killing the ranks (SIGKILL)");
        stop_all(SIGKILL);
        continue;
      }
      if (received_ == 0) received_ = sig;
      note(std::string("got SIG") + sigabbrev_np(sig) + "; forwarding it to the ranks");
      begin_stopping(sig);
    }
  }

  void supervise() {
    bool cleaned = false;
    Clock::time_point drain_deadline{};
    while (true) {
      reap();  // a child that ended before the loop started
      bool running = std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.running; });
      bool open =
          std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.out.fd >= 0 || r.err.fd >= 0; });
      if (!running && !cleaned) {
        // Every rank has exited: whatever they started goes too, which also
        // ends pipes that such leftovers kept open.
        signal_groups(SIGKILL, false);
        cleaned = true;
        drain_deadline = Clock::now() + std::chrono::seconds(2);
      }
      if (!running && (!open || Clock::now() >= drain_deadline)) break;
      if (stopping_ && !killed_ && Clock::now() >= kill_deadline_) {
        note("grace period over: killing the remaining ranks (SIGKILL)");
        stop_all(SIGKILL);
        killed_ = true;
      }
      std::vector<pollfd> fds = {{signal_fd_, POLLIN, 0}};
      std::vector<std::pair<Rank*, Stream*>> streams;
      for (Rank& r : ranks_) {
        for (Stream* s : {&r.out, &r.err}) {
          if (s->fd < 0) continue;
          fds.push_back({s->fd, POLLIN, 0});
          streams.emplace_back(&r, s);
        }
      }
      int timeout = -1;
      if (stopping_ && !killed_) timeout = detail::poll_timeout_ms(kill_deadline_);
      if (cleaned) timeout = detail::poll_timeout_ms(drain_deadline);
      int n = ::poll(fds.data(), fds.size(), timeout);
      if (n < 0 && errno != EINTR) EMBER_FAIL("ember-run: poll failed: " << detail::errno_text(errno));
      if (n <= 0) continue;
      for (size_t i = 1; i < fds.size(); ++i)
        if (fds[i].revents) drain(*streams[i - 1].first, *streams[i - 1].second);
      if (fds[0].revents) on_signals();
    }
    for (Rank& r : ranks_) {
      for (Stream* s : {&r.out, &r.err}) {
        if (s->fd >= 0) {
          emit(r, *s, nullptr, 0, true);
          ::close(s->fd);
          s->fd = -1;
        }
      }
    }
  }

  int exit_status() const {
    if (received_ != 0) return 128 + received_;
    if (failure_ >= 0) {
      const Rank& r = ranks_[size_t(failure_)];
      note("rank " + std::to_string(r.rank) + " failed first (" + status_text(r.status) + "); exiting with status " +
           std::to_string(exit_code_of(r.status)));
      return exit_code_of(r.status);
    }
    return 0;
  }

  LauncherOptions o_;
  std::unique_ptr<detail::TCPStoreServer> store_;
  std::vector<Rank> ranks_;
  int signal_fd_ = -1;
  sigset_t old_mask_{};
  struct sigaction old_pipe_ {};
  bool stopping_ = false;
  bool killed_ = false;
  Clock::time_point kill_deadline_{};
  int received_ = 0;   // the first forwarded signal
  long failure_ = -1;  // index of the first failing rank
};

}  // namespace

std::string launcher_usage() {
  return "usage: ember-run [options] program [args...]\n"
         "\n"
         "Starts nproc-per-node copies of program on this node, as ranks of a distributed job, with RANK,\n"
         "LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR and MASTER_PORT set (what\n"
         "parallel::init_process_group reads). Each line of output is prefixed with its rank. When a rank\n"
         "fails, the others are stopped and ember-run exits with that rank's status.\n"
         "\n"
         "options:\n"
         "  --nproc-per-node N   ranks on this node (default 1); 'gpu': one per visible GPU\n"
         "  --nnodes M           nodes in the job (default 1)\n"
         "  --node-rank K        this node's index, 0 to M-1 (default 0)\n"
         "  --master-addr A      host of node rank 0, whose ember-run serves the store (default 127.0.0.1)\n"
         "  --master-port P      its port (default 29500)\n"
         "  --standalone         one node: 127.0.0.1 and a free port instead of the two above\n"
         "  --grace-period S     seconds between SIGTERM and SIGKILL when stopping ranks (default 5)\n"
         "  -h, --help           this text\n"
         "\n"
         "examples:\n"
         "  ember-run --standalone --nproc-per-node 4 ./train --epochs 10\n"
         "  ember-run --nnodes 2 --node-rank 0 --nproc-per-node 8 --master-addr 10.0.0.1 ./train   # node 0\n"
         "  ember-run --nnodes 2 --node-rank 1 --nproc-per-node 8 --master-addr 10.0.0.1 ./train   # node 1\n";
}

LauncherOptions parse_launcher_args(const std::vector<std::string>& args) {
  LauncherOptions o;
  bool addr_given = false, port_given = false;
  size_t i = 0;
  auto value = [&](const std::string& flag, std::optional<std::string>& inline_value) {
    if (inline_value) return *inline_value;
    if (i + 1 >= args.size()) usage_error(flag + " needs a value");
    return args[++i];
  };
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // the program
    std::string name = arg;
    std::optional<std::string> inline_value;
    if (size_t eq = arg.find('='); eq != std::string::npos && arg.rfind("--", 0) == 0) {
      name = arg.substr(0, eq);
      inline_value = arg.substr(eq + 1);
    }
    name = option_name(name);
    if (name == "-h" || name == "--help") {
      o.help = true;
      return o;
    } else if (name == "--nproc-per-node") {
      std::string v = value(name, inline_value);
      if (v == "gpu") {
        o.nproc_per_node = cuda::device_count();
        if (o.nproc_per_node == 0)
          usage_error("--nproc-per-node gpu: no GPU is visible (CUDA_VISIBLE_DEVICES=" + cuda::visible_devices_env() +
                      "); give a number instead");
      } else {
        o.nproc_per_node = int_value(name, v, 1, 4096);
      }
    } else if (name == "--nnodes") {
      o.nnodes = int_value(name, value(name, inline_value), 1, 1 << 16);
    } else if (name == "--node-rank") {
      o.node_rank = int_value(name, value(name, inline_value), 0, 1 << 16);
    } else if (name == "--master-addr") {
      o.master_addr = value(name, inline_value);
      if (o.master_addr.empty()) usage_error("--master-addr is empty");
      addr_given = true;
    } else if (name == "--master-port") {
      o.master_port = int_value(name, value(name, inline_value), 1, 65535);
      port_given = true;
    } else if (name == "--standalone") {
      if (inline_value) usage_error("--standalone takes no value");
      o.standalone = true;
    } else if (name == "--grace-period") {
      std::string v = value(name, inline_value);
      char* end = nullptr;
      double seconds = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(seconds >= 0) || seconds > 3600) {
        usage_error("--grace-period takes seconds in [0, 3600], got '" + v + "'");
      }
      o.grace_period = std::chrono::milliseconds(int64_t(std::llround(seconds * 1000)));
    } else {
      usage_error("unknown option '" + arg + "'");
    }
  }
  o.command.assign(args.begin() + long(std::min(i, args.size())), args.end());
  if (o.command.empty()) usage_error("no program to run");
  if (o.node_rank >= o.nnodes) {
    usage_error("--node-rank " + std::to_string(o.node_rank) + " is not below --nnodes " + std::to_string(o.nnodes));
  }
  if (o.standalone) {
    if (o.nnodes != 1) usage_error("--standalone runs one node, but --nnodes is " + std::to_string(o.nnodes));
    if (addr_given || port_given)
      usage_error("--standalone picks the address and port itself; drop --master-addr/--master-port");
  }
  return o;
}

int run_launcher(const LauncherOptions& options) {
  LauncherOptions o = options;
  EMBER_CHECK(!o.command.empty(), "ember-run: no program to run");
  if (o.standalone) o.master_addr = "127.0.0.1";
  return Supervisor(o).run();
}

}  // namespace ember::parallel
