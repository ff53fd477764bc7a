// TCPStore: the Store that env:// initialization builds on MASTER_ADDR:MASTER_PORT.
// Rank 0 serves it from a thread of its own process; every rank, rank 0
// included, is a client.
//
//   TCPStore store("10.0.0.1", 29500, {.is_server = rank == 0, .timeout = std::chrono::seconds(60)});
//   store.set("nccl_id", id);               // rank 0
//   std::string id = store.get("nccl_id");  // every rank: waits until it is set
//
// Contract (beyond ember/parallel/distributed/store/store.h):
// - is_server: listens on port (0 picks a free one: port() tells which)
//   before connecting to itself. A loopback host binds the loopback address
//   only, any other host every interface.
// - Clients connect with retries and back-off (rank 0 may start after the
//   others) until the timeout, then throw an ember::Error that names
//   host:port, the last error and what to check.
// - Requests of one TCPStore are serialized (it is one connection); use one
//   TCPStore per thread for concurrency. When the server goes away (rank 0,
//   or ember-run, exited), every call throws an ember::Error that says so,
//   naming options.server and host:port, and so does every later call.
// - get()/wait() time out on the server's clock; the client gives the server
//   a grace period on top before calling it unresponsive.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ember/parallel/distributed/store/store.h"

namespace ember::parallel {

namespace detail {
class TCPStoreServer;
}

struct TCPStoreOptions {
  bool is_server = false;  // serve the store from this process (rank 0)
  // Which process serves the store, for the errors of a client that cannot
  // reach it: "rank 0", or "ember-run" when the launcher serves it.
  std::string server = "rank 0";
  // Connecting, and every get()/wait() without a timeout of its own.
  std::chrono::milliseconds timeout = kDefaultStoreTimeout;
};

class TCPStore : public Store {
 public:
  TCPStore(std::string host, int port, TCPStoreOptions options = {});
  ~TCPStore() override;

  void set(const std::string& key, const std::string& value) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;

  const std::string& host() const { return host_; }
  // The port the store is on (the one picked when constructed with port 0).
  int port() const { return port_; }
  bool is_server() const { return server_ != nullptr; }
  // The numeric address of this host's end of the connection to the store:
  // the interface through which this host reaches rank 0, so the address on
  // which the other ranks can reach this one (the Gloo transport binds it).
  std::string local_address() const;

 protected:
  std::string get_for(const std::string& key, std::chrono::milliseconds timeout) override;
  void wait_for(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

 private:
  struct Connection;

  std::string host_;
  int port_;
  std::unique_ptr<detail::TCPStoreServer> server_;  // declared before the connection: outlives it
  std::unique_ptr<Connection> connection_;
};

}  // namespace ember::parallel
