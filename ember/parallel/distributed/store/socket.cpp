// TCP helpers of ember/parallel/distributed/store/socket.h over the POSIX socket API.
#include "ember/parallel/distributed/store/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>
#include <thread>

#include "ember/core/error.h"

namespace ember::parallel::detail {

namespace {

struct AddrInfoDeleter {
  void operator()(addrinfo* ai) const { freeaddrinfo(ai); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoDeleter>;

// getaddrinfo for a TCP host:port; on failure returns null and the reason.
AddrInfoPtr resolve(const std::string& host, int port, int flags, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags | AI_NUMERICSERV;
  addrinfo* result = nullptr;
  const std::string service = std::to_string(port);
  int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &result);
  if (rc != 0) {
    *error = std::string("cannot resolve host '") + host +
             "': " + (rc == EAI_SYSTEM ? errno_text(errno) : std::string(gai_strerror(rc)));
    return nullptr;
  }
  return AddrInfoPtr(result);
}

bool is_loopback(const sockaddr* addr) {
  if (addr->sa_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(addr);
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (addr->sa_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(addr);
    return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
  }
  return false;
}

int bound_port_of(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  EMBER_CHECK(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0,
              "getsockname failed: " << errno_text(errno));
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
}

// Binds and listens on one address; returns the errno on failure.
int try_listen(int family, const sockaddr* addr, socklen_t len, int backlog, Socket* out) {
  Socket s(::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) return errno;
  int one = 1;
  // A restarted job can reuse its port while old connections sit in TIME_WAIT.
  if (setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) return errno;
  if (family == AF_INET6) {
    int zero = 0;  // dual stack: IPv4 clients reach the IPv6 wildcard too
    if (setsockopt(s.fd(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)) != 0) return errno;
  }
  if (::bind(s.fd(), addr, len) != 0) return errno;
  if (::listen(s.fd(), backlog) != 0) return errno;
  *out = std::move(s);
  return 0;
}

[[noreturn]] void throw_listen_error(const std::string& host, int port, int err) {
  EMBER_FAIL("cannot listen on " << host << ":" << port << ": " << errno_text(err)
                                 << (err == EADDRINUSE ? " (another process uses this port: choose another "
                                                         "MASTER_PORT, or let ember-run --standalone pick one)"
                                                       : ""));
}

// A non-blocking connect to one address, waited for until the deadline.
// Returns the connected socket, or an invalid one and the reason.
Socket try_connect(const addrinfo* ai, Clock::time_point deadline, std::string* error) {
  Socket s(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
  if (!s.valid()) {
    *error = errno_text(errno);
    return Socket();
  }
  int rc;
  do {
    rc = ::connect(s.fd(), ai->ai_addr, ai->ai_addrlen);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0 && errno != EINPROGRESS) {
    *error = errno_text(errno);
    return Socket();
  }
  if (rc != 0) {
    pollfd p{s.fd(), POLLOUT, 0};
    int n;
    do {
      n = ::poll(&p, 1, poll_timeout_ms(deadline));
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
      *error = errno_text(errno);
      return Socket();
    }
    if (n == 0) {
      *error = "connect timed out";
      return Socket();
    }
    int so_error = 0;
    socklen_t len = sizeof(so_error);
    if (getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &so_error, &len) != 0) so_error = errno;
    if (so_error != 0) {
      *error = errno_text(so_error);
      return Socket();
    }
  }
  int flags = fcntl(s.fd(), F_GETFL);
  EMBER_CHECK(flags >= 0 && fcntl(s.fd(), F_SETFL, flags & ~O_NONBLOCK) == 0, "fcntl failed: " << errno_text(errno));
  int one = 1;
  EMBER_CHECK(setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) == 0,
              "setsockopt(TCP_NODELAY) failed: " << errno_text(errno));
  return s;
}

// Waits for fd to be ready for `events`; false when the deadline passed.
// Errors other than EINTR are left to the following send/recv to report.
bool wait_ready(int fd, short events, Clock::time_point deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, poll_timeout_ms(deadline));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) return true;
  }
}

}  // namespace

std::string errno_text(int err) {
  char buf[256];
  // GNU strerror_r returns the message (possibly not in buf).
  return strerror_r(err, buf, sizeof(buf));
}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) {
    // Linux releases the descriptor even when close() reports EINTR; retrying
    // could close a descriptor another thread has just opened.
    ::close(fd_);
    fd_ = -1;
  }
}

Listener listen_tcp(const std::string& host, int port, int backlog) {
  EMBER_CHECK(port >= 0 && port <= 65535,
              "cannot listen on " << host << ":" << port << ": the port must be in [0, 65535]");
  std::string error;
  AddrInfoPtr ai = resolve(host, port, AI_PASSIVE, &error);
  EMBER_CHECK(ai, "cannot listen on " << host << ":" << port << ": " << error);
  bool loopback = true;
  for (const addrinfo* a = ai.get(); a; a = a->ai_next) loopback = loopback && is_loopback(a->ai_addr);

  Listener out;
  int err = 0;
  if (loopback) {
    for (const addrinfo* a = ai.get(); a; a = a->ai_next) {
      err = try_listen(a->ai_family, a->ai_addr, a->ai_addrlen, backlog, &out.socket);
      if (err == 0) break;
    }
  } else {
    sockaddr_in6 any6{};
    any6.sin6_family = AF_INET6;
    any6.sin6_addr = in6addr_any;
    any6.sin6_port = htons(uint16_t(port));
    err = try_listen(AF_INET6, reinterpret_cast<sockaddr*>(&any6), sizeof(any6), backlog, &out.socket);
    if (err != 0 && err != EADDRINUSE) {  // no IPv6 on this host: IPv4 only
      sockaddr_in any4{};
      any4.sin_family = AF_INET;
      any4.sin_addr.s_addr = htonl(INADDR_ANY);
      any4.sin_port = htons(uint16_t(port));
      err = try_listen(AF_INET, reinterpret_cast<sockaddr*>(&any4), sizeof(any4), backlog, &out.socket);
    }
  }
  if (err != 0) throw_listen_error(host, port, err);
  out.port = bound_port_of(out.socket.fd());
  return out;
}

int free_port(const std::string& host) { return listen_tcp(host, 0).port; }

Socket connect_with_retry(const std::string& host, int port, Clock::time_point deadline, const std::string& advice) {
  auto backoff = std::chrono::milliseconds(10);
  std::string error = "no attempt was made (the timeout is zero)";
  const auto start = Clock::now();
  do {
    AddrInfoPtr ai = resolve(host, port, 0, &error);
    for (const addrinfo* a = ai.get(); a; a = a->ai_next) {
      Socket s = try_connect(a, deadline, &error);
      if (s.valid()) return s;
    }
    auto now = Clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  } while (Clock::now() < deadline);
  auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  EMBER_FAIL("could not connect to " << host << ":" << port << " within " << waited << " ms (last error: " << error
                                     << "). " << advice);
}

IoResult send_all(int fd, const void* data, size_t size, Clock::time_point deadline) {
  auto* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      size -= size_t(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_ready(fd, POLLOUT, deadline))
        return {IoStatus::Timeout, "the send did not complete before the deadline"};
      continue;
    }
    return {IoStatus::Closed, errno_text(errno)};
  }
  return {};
}

IoResult recv_all(int fd, void* data, size_t size, Clock::time_point deadline) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = ::recv(fd, p, size, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      size -= size_t(n);
      continue;
    }
    if (n == 0) return {IoStatus::Closed, "the connection was closed by the peer"};
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_ready(fd, POLLIN, deadline)) return {IoStatus::Timeout, "no answer before the deadline"};
      continue;
    }
    return {IoStatus::Closed, errno_text(errno)};
  }
  return {};
}

std::string local_address(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  EMBER_CHECK(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0,
              "getsockname failed: " << errno_text(errno));
  char host[NI_MAXHOST];
  int rc = getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST);
  EMBER_CHECK(rc == 0, "getnameinfo failed: " << gai_strerror(rc));
  std::string out = host;
  // An IPv4 client of a dual-stack socket shows up as ::ffff:a.b.c.d.
  if (out.rfind("::ffff:", 0) == 0 && out.find('.') != std::string::npos) out = out.substr(7);
  return out;
}

void set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  EMBER_CHECK(flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0,
              "fcntl(O_NONBLOCK) failed: " << errno_text(errno));
}

int poll_timeout_ms(Clock::time_point deadline) {
  auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return int(std::min<int64_t>(ms, INT_MAX));
}

}  // namespace ember::parallel::detail
