// The server side of TCPStore: one thread that owns the keys and answers
// every client over non-blocking sockets with poll(). Internal to parallel/;
// TCPStore(is_server = true) runs one.
//
// Contract:
// - It never blocks on one client: a slow reader only grows its own output
//   buffer, a Get or Wait whose keys are missing waits as a pending request
//   (answered when a Set/Add/CompareSet creates the last key, or with Timeout
//   when its deadline passes) while the others are served.
// - A client that disconnects, sends a frame over kMaxStoreFrame, a
//   malformed frame, or anything but the Hello handshake first is dropped
//   (its pending request with it); the store and the other clients go on.
// - The destructor stops the thread and closes every connection, so clients
//   see their connection closed rather than waiting for their timeouts.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "ember/parallel/distributed/store/socket.h"

namespace ember::parallel::detail {

class TCPStoreServer {
 public:
  // Listens on host:port (port 0: a free one) and starts serving.
  TCPStoreServer(const std::string& host, int port);
  ~TCPStoreServer();
  TCPStoreServer(const TCPStoreServer&) = delete;
  TCPStoreServer& operator=(const TCPStoreServer&) = delete;

  int port() const { return port_; }

 private:
  struct State;

  Socket listener_;
  int port_ = 0;
  Socket wake_read_;  // the destructor writes to wake_write_ to stop the loop
  Socket wake_write_;
  std::unique_ptr<State> state_;  // touched by the serving thread only
  std::thread thread_;
};

}  // namespace ember::parallel::detail
