// TorchStoreClient: ember's Store as a client of PyTorch's TCPStore server,
// the one torchrun's agent hosts at MASTER_ADDR:MASTER_PORT (it tells its
// workers so with TORCHELASTIC_USE_AGENT_STORE=True). init_process_group
// uses it there, under PrefixStore("/worker/attempt_<TORCHELASTIC_RESTART_COUNT>"),
// the prefix torch's own env:// rendezvous gives its workers.
//
//   TorchStoreClient store("127.0.0.1", 29500);
//   store.set("k", "v");   // the key "/k" on the server, as torch's TCPStore writes it
//
// The wire protocol (torch/csrc/distributed/c10d/TCPStore.cpp,
// TCPStoreBackend.hpp, TCPStoreLibUvBackend.cpp): unframed requests, a query
// byte then its fields, little-endian; a string or byte vector is a u64
// length and the bytes, a key list a u64 count and the strings. Every key is
// sent with "/" in front (TCPStore::keyPrefix_). Replies: a byte vector
// (GET, COMPARE_SET), an i64 (ADD, GETNUMKEYS, DELETE_KEY) or a byte (CHECK:
// 0 ready, 1 not ready; WAIT: 0 when every key exists); SET has none.
//
//   query         2.x  1.13  request fields -> reply
//   VALIDATE       0    -    u32 0x3C85F7CE (first on a connection; no reply)
//   SET            1    0    key value
//   COMPARE_SET    2    1    key expected desired -> value
//   GET            3    2    key -> value (the key must exist: WAIT first)
//   ADD            4    3    key i64 -> i64
//   CHECK          5    4    keys -> byte
//   WAIT           6    5    keys -> byte
//   GETNUMKEYS     7    6    -> i64
//   DELETE_KEY     8    8    key -> i64
//
// Contract (beyond ember/parallel/distributed/store/store.h):
// - The two numberings are told apart before anything else, because a 2.x
//   VALIDATE reads to a 1.13 server as a SET of a gigabyte-long key: on a
//   connection of its own the client sends the byte 6, GETNUMKEYS to 1.13
//   (which answers at once) and a first query other than VALIDATE to 2.x
//   (which drops or ignores the connection). No answer within 300 ms means
//   2.x; every later connection then starts with VALIDATE and a GETNUMKEYS
//   that must be answered. A server that answers neither way is an
//   ember::Error naming host:port.
// - get()/wait() time out on the client's clock. Since 1.13 has no
//   CANCEL_WAIT, a WAIT that times out drops its connection and opens a new
//   one; the error names the keys still missing.
// - add() on a value that is not an integer makes the server drop the
//   connection (PyTorch's server does), so it fails as a lost connection.
// - compare_set keeps store.h's contract (empty when the key still does
//   not exist), where PyTorch's server answers `expected` then.
// - One connection, requests serialized; a lost connection makes this and
//   every later call an ember::Error that names torchrun's agent.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "ember/parallel/distributed/store/store.h"

namespace ember::parallel {

// Which numbering the server speaks.
enum class TorchStoreProtocol {
  WithValidate,     // PyTorch 2.x: VALIDATE = 0, SET = 1, ...
  WithoutValidate,  // PyTorch 1.13: SET = 0, ...
};

class TorchStoreClient : public Store {
 public:
  // Connects (retrying until the timeout) and finds out the protocol.
  TorchStoreClient(std::string host, int port, std::chrono::milliseconds timeout = kDefaultStoreTimeout);
  ~TorchStoreClient() override;

  void set(const std::string& key, const std::string& value) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;

  TorchStoreProtocol protocol() const;
  // The numeric address of this host's end of the connection (what the
  // Gloo transport binds, as with TCPStore::local_address()).
  std::string local_address() const;

 protected:
  std::string get_for(const std::string& key, std::chrono::milliseconds timeout) override;
  void wait_for(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

 private:
  struct Connection;
  std::unique_ptr<Connection> connection_;
};

}  // namespace ember::parallel
