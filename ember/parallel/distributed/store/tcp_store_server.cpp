// The TCPStore server loop (ember/parallel/distributed/store/tcp_store_server.h): poll() over the
// listening socket, a wake-up pipe and every client; frames are parsed from
// per-client input buffers and answered into per-client output buffers.
#include "ember/parallel/distributed/store/tcp_store_server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <map>
#include <unordered_map>
#include <vector>

#include "ember/core/error.h"
#include "ember/parallel/distributed/store/store_protocol.h"

namespace ember::parallel::detail {

namespace {

struct Client {
  Socket socket;
  std::string in;        // bytes received, not yet parsed
  std::string out;       // replies not yet sent
  bool greeted = false;  // the Hello handshake is done
  bool blocked = false;  // a Get or Wait of this client is pending: its next frames wait
  bool eof = false;      // the client closed its end (frames it sent before still count)
  bool closed = false;   // to be dropped
};

struct Pending {
  uint64_t client;
  StoreCommand command;  // Get or Wait
  std::vector<std::string> keys;
  Clock::time_point deadline;
};

std::string reply_ok() { return FrameWriter().u8(uint8_t(StoreStatus::Ok)).finish(); }
std::string reply_int(int64_t v) { return FrameWriter().u8(uint8_t(StoreStatus::Int)).i64(v).finish(); }
std::string reply_value(std::string_view v) { return FrameWriter().u8(uint8_t(StoreStatus::Value)).bytes(v).finish(); }
std::string reply_error(std::string_view text) {
  return FrameWriter().u8(uint8_t(StoreStatus::Error)).bytes(text).finish();
}

constexpr uint32_t kMaxHelloFrame = 256;

}  // namespace

struct TCPStoreServer::State {
  std::map<std::string, std::string> data;
  std::unordered_map<uint64_t, Client> clients;
  std::vector<Pending> pending;
  uint64_t next_client = 0;

  bool has_all(const std::vector<std::string>& keys) const {
    return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return data.count(k) != 0; });
  }

  // The reply to a pending Get/Wait whose keys all exist.
  std::string answer(const Pending& p) const {
    if (p.command == StoreCommand::Get) return reply_value(data.at(p.keys[0]));
    return reply_ok();
  }

  std::string timeout_reply(const Pending& p) const {
    FrameWriter w;
    w.u8(uint8_t(StoreStatus::Timeout));
    std::vector<std::string> missing;
    for (const std::string& k : p.keys)
      if (!data.count(k)) missing.push_back(k);
    w.keys(missing);
    return w.finish();
  }

  // Handles one request; returns false when the client broke the protocol.
  bool handle(uint64_t id, Client& c, std::string_view payload) {
    FrameReader r(payload);
    auto command = StoreCommand(r.u8());
    if (!c.greeted) {
      if (command != StoreCommand::Hello || r.bytes() != kStoreMagic) return false;
      c.greeted = true;
      c.out += FrameWriter().u8(uint8_t(StoreStatus::Ok)).bytes(kStoreMagic).finish();
      return true;
    }
    switch (command) {
      case StoreCommand::Set: {
        std::string key = r.bytes();
        data[key] = r.bytes();
        c.out += reply_ok();
        return true;
      }
      case StoreCommand::Get:
      case StoreCommand::Wait: {
        std::vector<std::string> keys;
        if (command == StoreCommand::Get) {
          keys.push_back(r.bytes());
        } else {
          keys = r.keys();
        }
        int64_t timeout_ms = std::max<int64_t>(r.i64(), 0);
        Pending p{id, command, std::move(keys), Clock::now() + std::chrono::milliseconds(timeout_ms)};
        if (has_all(p.keys)) {
          c.out += answer(p);
        } else {
          c.blocked = true;
          pending.push_back(std::move(p));
        }
        return true;
      }
      case StoreCommand::Add: {
        std::string key = r.bytes();
        int64_t delta = r.i64();
        int64_t value = 0;
        auto it = data.find(key);
        if (it != data.end()) {
          const std::string& s = it->second;
          auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
          if (ec != std::errc() || end != s.data() + s.size()) {
            c.out += reply_error("the value of \"" + key + "\" is not an integer (" + std::to_string(s.size()) +
                                 " bytes set by set()), so add() cannot count on it");
            return true;
          }
        }
        value += delta;
        data[key] = std::to_string(value);
        c.out += reply_int(value);
        return true;
      }
      case StoreCommand::CompareSet: {
        std::string key = r.bytes();
        std::string expected = r.bytes();
        std::string desired = r.bytes();
        auto it = data.find(key);
        if (it == data.end()) {
          if (expected.empty()) {
            data[key] = desired;
            c.out += reply_value(desired);
          } else {
            c.out += reply_value("");
          }
        } else {
          if (it->second == expected) it->second = desired;
          c.out += reply_value(it->second);
        }
        return true;
      }
      case StoreCommand::Check: c.out += reply_int(has_all(r.keys()) ? 1 : 0); return true;
      case StoreCommand::Delete: c.out += reply_int(data.erase(r.bytes()) ? 1 : 0); return true;
      case StoreCommand::NumKeys: c.out += reply_int(int64_t(data.size())); return true;
      case StoreCommand::Hello: return false;
    }
    return false;
  }

  // Parses and handles the complete frames of a client's input, stopping at
  // a pending request (its reply must come before the next one's).
  void process_input(uint64_t id, Client& c) {
    size_t pos = 0;
    while (!c.blocked && !c.closed && c.in.size() - pos >= 4) {
      uint32_t len = frame_length(c.in.data() + pos);
      // Before the handshake only a small Hello is valid: a stray client
      // (a port scanner, an HTTP request) is dropped at its first bytes.
      if (len > kMaxStoreFrame || len == 0 || (!c.greeted && len > kMaxHelloFrame)) {
        c.closed = true;
        break;
      }
      if (c.in.size() - pos - 4 < len) break;
      std::string_view payload(c.in.data() + pos + 4, len);
      pos += 4 + size_t(len);
      try {
        if (!handle(id, c, payload)) c.closed = true;
      } catch (const Error&) {  // a malformed frame
        c.closed = true;
      }
    }
    c.in.erase(0, pos);
  }

  void flush(Client& c) {
    while (!c.out.empty() && !c.closed) {
      ssize_t n = ::send(c.socket.fd(), c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        c.out.erase(0, size_t(n));
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return;  // POLLOUT will tell when to go on
      } else {
        c.closed = true;
      }
    }
  }

  void read(Client& c) {
    char buf[64 * 1024];
    while (!c.closed) {
      ssize_t n = ::recv(c.socket.fd(), buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0) {
        c.in.append(buf, size_t(n));
        // Do not buffer without bound for a client that never completes a frame.
        if (c.in.size() > size_t(kMaxStoreFrame) + 4 + sizeof(buf)) c.closed = true;
      } else if (n == 0) {
        c.eof = true;
        return;
      } else if (errno == EINTR) {
        continue;
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return;
      } else {
        c.closed = true;
      }
    }
  }

  // Answers the pending requests whose keys now exist or whose deadline
  // passed. An answer lets that client's next frames run, which may create
  // keys another pending request waits for: repeat until nothing moves (each
  // round answers at least one request, so this ends).
  void settle_pending() {
    while (true) {
      auto now = Clock::now();
      std::vector<uint64_t> unblocked;
      for (size_t i = 0; i < pending.size();) {
        Pending& p = pending[i];
        auto it = clients.find(p.client);
        bool ready = has_all(p.keys);
        if (it == clients.end() || it->second.closed) {
          pending.erase(pending.begin() + long(i));
        } else if (ready || now >= p.deadline) {
          it->second.out += ready ? answer(p) : timeout_reply(p);
          it->second.blocked = false;
          unblocked.push_back(p.client);
          pending.erase(pending.begin() + long(i));
        } else {
          ++i;
        }
      }
      if (unblocked.empty()) return;
      for (uint64_t id : unblocked) {
        Client& c = clients.at(id);
        process_input(id, c);
        flush(c);
      }
    }
  }

  int poll_timeout() const {
    if (pending.empty()) return -1;
    auto first = std::min_element(pending.begin(), pending.end(),
                                  [](const Pending& a, const Pending& b) { return a.deadline < b.deadline; });
    return poll_timeout_ms(first->deadline);
  }

  void accept_all(int listener) {
    while (true) {
      int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;  // EAGAIN: no more; EMFILE and the like: try again at the next wake-up
      }
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // latency only; failure is harmless
      Client c;
      c.socket = Socket(fd);
      clients.emplace(next_client++, std::move(c));
    }
  }

  void serve(int listener, int wake) {
    std::vector<pollfd> fds;
    std::vector<uint64_t> ids;
    while (true) {
      fds.assign({{wake, POLLIN, 0}, {listener, POLLIN, 0}});
      ids.clear();
      for (auto& [id, c] : clients) {
        fds.push_back({c.socket.fd(), short(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
        ids.push_back(id);
      }
      int n = ::poll(fds.data(), fds.size(), poll_timeout());
      if (n < 0) {
        if (errno == EINTR) continue;
        std::fprintf(stderr, "ember TCPStore server: poll failed (%s); the store stops serving\n",
                     errno_text(errno).c_str());
        return;
      }
      if (fds[0].revents) return;  // the destructor asks to stop
      bool changed = false;
      for (size_t i = 0; i < ids.size(); ++i) {
        short ev = fds[i + 2].revents;
        if (!ev) continue;
        Client& c = clients.at(ids[i]);
        if (ev & (POLLIN | POLLHUP | POLLERR)) {
          read(c);
          process_input(ids[i], c);
          if (c.eof) c.closed = true;
          changed = true;
        }
        flush(c);
      }
      if (fds[1].revents & POLLIN) accept_all(listener);
      if (changed || !pending.empty()) settle_pending();
      for (auto it = clients.begin(); it != clients.end();) {
        if (it->second.closed) {
          it = clients.erase(it);
        } else {
          ++it;
        }
      }
    }
  }
};

TCPStoreServer::TCPStoreServer(const std::string& host, int port) : state_(std::make_unique<State>()) {
  Listener l = listen_tcp(host, port);
  listener_ = std::move(l.socket);
  port_ = l.port;
  set_nonblocking(listener_.fd());
  int pipe_fds[2];
  EMBER_CHECK(::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) == 0, "TCPStore server: pipe2 failed: " << errno_text(errno));
  wake_read_ = Socket(pipe_fds[0]);
  wake_write_ = Socket(pipe_fds[1]);
  thread_ = std::thread([this] { state_->serve(listener_.fd(), wake_read_.fd()); });
}

TCPStoreServer::~TCPStoreServer() {
  char byte = 1;
  ssize_t n;
  do {
    n = ::write(wake_write_.fd(), &byte, 1);
  } while (n < 0 && errno == EINTR);
  thread_.join();
}

}  // namespace ember::parallel::detail
