// TCP sockets for the store and the launcher: an owning file descriptor,
// listening, connecting with retries, and whole-buffer I/O under deadlines.
// Internal to parallel/.
//
// Contract:
// - Every system call is checked; EINTR is retried, never reported.
// - connect_with_retry() keeps trying (connection refused, host unreachable,
//   a name that does not resolve yet) with exponential back-off until its
//   deadline, then throws an ember::Error naming host:port and the last
//   error, with the caller's advice appended.
// - send_all() / recv_all() move the whole buffer or report why not: the
//   deadline passed (Timeout) or the peer closed the connection (Closed);
//   other failures (ECONNRESET included, as a Closed) never throw from them,
//   so the caller words the error with its own context.
// - Sockets are made with SOCK_CLOEXEC, so a program the launcher executes
//   inherits none of them.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace ember::parallel::detail {

using Clock = std::chrono::steady_clock;

// strerror(err) as a string ("Connection refused").
std::string errno_text(int err);

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { close(); }
  Socket(Socket&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void close();

 private:
  int fd_ = -1;
};

// A listening TCP socket on host:port. Port 0 lets the kernel pick a free
// port; bound_port() tells which. A loopback host (127.0.0.1, localhost,
// ::1) binds that address only; any other host binds every interface (the
// store must be reachable from the other nodes on whatever address they
// use for it).
struct Listener {
  Socket socket;
  int port = 0;
};
Listener listen_tcp(const std::string& host, int port, int backlog = 128);

// A free TCP port on host, found by binding port 0 and closing the socket
// (another process may take it before the caller binds it; the launcher's
// --standalone accepts that race, as torchrun does).
int free_port(const std::string& host = "127.0.0.1");

// Connects to host:port, retrying with back-off (10 ms doubling to 1 s) until
// the deadline. The socket returned is blocking, with TCP_NODELAY.
Socket connect_with_retry(const std::string& host, int port, Clock::time_point deadline, const std::string& advice);

enum class IoStatus { Ok, Timeout, Closed };
struct IoResult {
  IoStatus status = IoStatus::Ok;
  std::string error;  // why, for Timeout and Closed ("Connection reset by peer")
  bool ok() const { return status == IoStatus::Ok; }
};
IoResult send_all(int fd, const void* data, size_t size, Clock::time_point deadline);
IoResult recv_all(int fd, void* data, size_t size, Clock::time_point deadline);

// The numeric local address of a connected socket ("10.0.0.5", "::1"): the
// address of the interface through which this host reaches the peer.
std::string local_address(int fd);

// Puts fd in non-blocking mode (the store server never blocks on a client).
void set_nonblocking(int fd);

// Milliseconds from now to the deadline, clamped to [0, INT_MAX] for poll().
int poll_timeout_ms(Clock::time_point deadline);

}  // namespace ember::parallel::detail
