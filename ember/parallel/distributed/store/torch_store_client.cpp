// TorchStoreClient (ember/parallel/distributed/store/torch_store_client.h): the
// protocol probe, request encoding in either numbering, and every failure
// turned into an ember::Error that names torchrun's store.
#include "ember/parallel/distributed/store/torch_store_client.h"

#include <cstring>
#include <mutex>
#include <utility>

#include "ember/core/error.h"
#include "ember/parallel/distributed/store/socket.h"

namespace ember::parallel {

using detail::Clock;

namespace {

enum class Query { Validate, Set, CompareSet, Get, Add, Check, Wait, GetNumKeys, DeleteKey };

uint8_t code(TorchStoreProtocol protocol, Query q) {
  if (protocol == TorchStoreProtocol::WithValidate) return uint8_t(q);  // 2.x numbers them in this order
  EMBER_CHECK(q != Query::Validate, "TorchStoreClient: PyTorch 1.13 has no VALIDATE query (an ember bug)");
  return q == Query::DeleteKey ? 8 : uint8_t(int(q) - 1);  // 1.13 has WATCH_KEY at 7
}

constexpr uint32_t kValidateMagic = 0x3C85F7CE;
// The byte the probe sends: GETNUMKEYS in 1.13's numbering.
constexpr uint8_t kProbe = 6;
constexpr auto kProbeWindow = std::chrono::milliseconds(300);
// Every key on the wire starts with this (torch's TCPStore::keyPrefix_).
constexpr const char* kKeyPrefix = "/";
// Longer answers are refused: a stray program on the port does not make us allocate gigabytes.
constexpr uint64_t kMaxValue = 1ull << 30;

std::string quoted(const std::string& key) { return "\"" + key + "\""; }

std::string quoted(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size(); ++i) out += (i ? ", " : "") + quoted(keys[i]);
  return out;
}

class Request {
 public:
  Request(TorchStoreProtocol protocol, Query q) { buf_.push_back(char(code(protocol, q))); }
  template <typename T>
  Request& value(T v) {
    buf_.append(reinterpret_cast<const char*>(&v), sizeof(T));  // little-endian, as torch sends it on x86
    return *this;
  }
  Request& bytes(const std::string& s) {
    value<uint64_t>(s.size());
    buf_ += s;
    return *this;
  }
  Request& key(const std::string& k) { return bytes(kKeyPrefix + k); }
  Request& keys(const std::vector<std::string>& ks) {
    value<uint64_t>(ks.size());
    for (const std::string& k : ks) key(k);
    return *this;
  }
  const std::string& str() const { return buf_; }

 private:
  std::string buf_;
};

}  // namespace

struct TorchStoreClient::Connection {
  std::string host;
  int port = 0;
  std::string where;  // "host:port"
  std::chrono::milliseconds timeout{};
  TorchStoreProtocol protocol = TorchStoreProtocol::WithValidate;
  detail::Socket socket;
  mutable std::mutex mutex;
  std::string broken;  // why the connection is unusable; empty while it works

  std::string advice() const {
    return "TorchStoreClient: TORCHELASTIC_USE_AGENT_STORE=True says that torchrun's agent serves a store at "
           "MASTER_ADDR:MASTER_PORT; check that the agent runs. To run ember without torchrun, use ember-run "
           "(or unset TORCHELASTIC_USE_AGENT_STORE to make rank 0 serve ember's own store)";
  }

  [[noreturn]] void fail(const std::string& what, const std::string& why) {
    broken = why;
    socket.close();
    EMBER_FAIL("TorchStoreClient " << what << " at " << where << ": " << why);
  }

  void check_usable(const std::string& what) const {
    EMBER_CHECK(broken.empty(), "TorchStoreClient " << what << " at " << where
                                                    << ": the store is unusable since an earlier error: " << broken);
  }

  [[noreturn]] void lost(const std::string& what, const detail::IoResult& io) {
    if (io.status == detail::IoStatus::Timeout) {
      fail(what, "torchrun's store did not answer in time (" + io.error + "); the agent may be stopped or overloaded");
    }
    fail(what, "the connection to torchrun's store was lost (" + io.error +
                   "). torchrun's agent serves it: the agent has probably exited or is stopping this worker; look "
                   "at its output");
  }

  void send(const Request& r, const std::string& what, Clock::time_point deadline) {
    detail::IoResult io = detail::send_all(socket.fd(), r.str().data(), r.str().size(), deadline);
    if (!io.ok()) lost(what, io);
  }

  template <typename T>
  T receive(const std::string& what, Clock::time_point deadline) {
    T v{};
    detail::IoResult io = detail::recv_all(socket.fd(), &v, sizeof(T), deadline);
    if (!io.ok()) lost(what, io);
    return v;
  }

  std::string receive_bytes(const std::string& what, Clock::time_point deadline) {
    uint64_t n = receive<uint64_t>(what, deadline);
    if (n > kMaxValue) fail(what, "the server sent a malformed answer (a value of " + std::to_string(n) + " bytes)");
    std::string out(n, '\0');
    detail::IoResult io = detail::recv_all(socket.fd(), out.data(), n, deadline);
    if (!io.ok()) lost(what, io);
    return out;
  }

  // A new connection in the known protocol: 2.x wants VALIDATE first; a
  // GETNUMKEYS answered proves the server is a torch store.
  void open(Clock::time_point deadline) {
    socket = detail::connect_with_retry(host, port, deadline, advice());
    if (protocol == TorchStoreProtocol::WithoutValidate) return;
    const auto answer_deadline = std::max(deadline, Clock::now() + std::chrono::seconds(1));
    Request validate(protocol, Query::Validate);
    validate.value<uint32_t>(kValidateMagic);
    detail::IoResult io = detail::send_all(socket.fd(), validate.str().data(), validate.str().size(), answer_deadline);
    Request count(protocol, Query::GetNumKeys);
    if (io.ok()) io = detail::send_all(socket.fd(), count.str().data(), count.str().size(), answer_deadline);
    int64_t keys = 0;
    if (io.ok()) io = detail::recv_all(socket.fd(), &keys, sizeof(keys), answer_deadline);
    if (!io.ok()) {
      socket.close();
      EMBER_FAIL("TorchStoreClient: " << where << " accepted the connection but answered neither as a PyTorch 2.x "
                                      << "TCPStore nor as a 1.13 one (" << io.error << "): another program listens "
                                      << "there, or a PyTorch whose store protocol ember does not know. " << advice());
    }
  }

  // Connects and finds out the protocol (the header's contract).
  void probe(Clock::time_point deadline) {
    socket = detail::connect_with_retry(host, port, deadline, advice());
    int64_t keys = 0;
    detail::IoResult io = detail::send_all(socket.fd(), &kProbe, 1, deadline);
    if (io.ok()) io = detail::recv_all(socket.fd(), &keys, sizeof(keys), Clock::now() + kProbeWindow);
    if (io.ok()) {
      protocol = TorchStoreProtocol::WithoutValidate;
      return;
    }
    socket.close();
    protocol = TorchStoreProtocol::WithValidate;
    open(deadline);
  }

  bool check_locked(const std::vector<std::string>& keys, const std::string& what) {
    send(Request(protocol, Query::Check).keys(keys), what, Clock::now() + timeout);
    uint8_t answer = receive<uint8_t>(what, Clock::now() + timeout);
    if (answer > 1) fail(what, "the server sent a malformed answer to CHECK (" + std::to_string(answer) + ")");
    return answer == 0;
  }

  void wait_locked(const std::vector<std::string>& keys, std::chrono::milliseconds wait_timeout,
                   const std::string& what) {
    if (keys.empty()) return;
    send(Request(protocol, Query::Wait).keys(keys), what, Clock::now() + timeout);
    uint8_t answer = 0;
    detail::IoResult io = detail::recv_all(socket.fd(), &answer, 1, Clock::now() + wait_timeout);
    if (io.ok()) {
      if (answer != 0) fail(what, "the server sent a malformed answer to WAIT (" + std::to_string(answer) + ")");
      return;
    }
    if (io.status != detail::IoStatus::Timeout) lost(what, io);
    // The server still holds the WAIT: a fresh connection leaves it behind.
    socket.close();
    try {
      open(Clock::now() + timeout);
    } catch (const Error& e) {
      fail(what, std::string("reconnecting after a timed-out wait failed: ") + e.what());
    }
    std::vector<std::string> missing;
    for (const std::string& k : keys)
      if (!check_locked({k}, what)) missing.push_back(k);
    EMBER_FAIL("TorchStoreClient " << what << " at " << where << ": " << missing.size() << " of " << keys.size()
                                   << " keys were not set within " << wait_timeout.count() << " ms: " << quoted(missing)
                                   << ". Is every rank running, and do all of them use this torchrun's store?");
  }
};

TorchStoreClient::TorchStoreClient(std::string host, int port, std::chrono::milliseconds timeout)
    : Store(timeout), connection_(std::make_unique<Connection>()) {
  EMBER_CHECK(!host.empty(), "TorchStoreClient: the host is empty (MASTER_ADDR names torchrun's store)");
  EMBER_CHECK(port > 0 && port <= 65535, "TorchStoreClient: port " << port << " is not in [1, 65535]");
  EMBER_CHECK(timeout.count() >= 0,
              "TorchStoreClient: the timeout must not be negative, got " << timeout.count() << " ms");
  Connection& c = *connection_;
  c.host = std::move(host);
  c.port = port;
  c.where = c.host + ":" + std::to_string(port);
  c.timeout = timeout;
  c.probe(Clock::now() + timeout);
}

TorchStoreClient::~TorchStoreClient() = default;

TorchStoreProtocol TorchStoreClient::protocol() const { return connection_->protocol; }

void TorchStoreClient::set(const std::string& key, const std::string& value) {
  Connection& c = *connection_;
  const std::string what = "set(" + quoted(key) + ")";
  std::lock_guard<std::mutex> lock(c.mutex);
  c.check_usable(what);
  c.send(Request(c.protocol, Query::Set).key(key).bytes(value), what, Clock::now() + c.timeout);
}

std::string TorchStoreClient::get_for(const std::string& key, std::chrono::milliseconds timeout) {
  Connection& c = *connection_;
  const std::string what = "get(" + quoted(key) + ")";
  std::lock_guard<std::mutex> lock(c.mutex);
  c.check_usable(what);
  c.wait_locked({key}, timeout, what);  // GET of a missing key is an error to the server
  c.send(Request(c.protocol, Query::Get).key(key), what, Clock::now() + c.timeout);
  return c.receive_bytes(what, Clock::now() + c.timeout);
}

int64_t TorchStoreClient::add(const std::string& key, int64_t delta) {
  Connection& c = *connection_;
  const std::string what = "add(" + quoted(key) + ", " + std::to_string(delta) + ")";
  std::lock_guard<std::mutex> lock(c.mutex);
  c.check_usable(what);
  c.send(Request(c.protocol, Query::Add).key(key).value<int64_t>(delta), what, Clock::now() + c.timeout);
  return c.receive<int64_t>(what, Clock::now() + c.timeout);
}

std::string TorchStoreClient::compare_set(const std::string& key, const std::string& expected,
                                          const std::string& desired) {
  Connection& c = *connection_;
  const std::string what = "compare_set(" + quoted(key) + ")";
  std::lock_guard<std::mutex> lock(c.mutex);
  c.check_usable(what);
  c.send(Request(c.protocol, Query::CompareSet).key(key).bytes(expected).bytes(desired), what,
         Clock::now() + c.timeout);
  std::string now = c.receive_bytes(what, Clock::now() + c.timeout);
  // PyTorch answers `expected` for a missing key; store.h's contract answers empty.
  if (!expected.empty() && now == expected && (expected != desired || !c.check_locked({key}, what))) return "";
  return now;
}

void TorchStoreClient::wait_for(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  Connection& c = *connection_;
  const std::string what = "wait([" + quoted(keys) + "])";
  std::lock_guard<std::mutex> lock(c.mutex);
  c.check_usable(what);
  c.wait_locked(keys, timeout, what);
}

bool TorchStoreClient::check(const std::vector<std::string>& keys) {
  Connection& c = *connection_;
  const std::string what = "check([" + quoted(keys) + "])";
  std::lock_guard<std::mutex> lock(c.mutex);
  c.check_usable(what);
  return c.check_locked(keys, what);
}

bool TorchStoreClient::delete_key(const std::string& key) {
  Connection& c = *connection_;
  const std::string what = "delete_key(" + quoted(key) + ")";
  std::lock_guard<std::mutex> lock(c.mutex);
  c.check_usable(what);
  c.send(Request(c.protocol, Query::DeleteKey).key(key), what, Clock::now() + c.timeout);
  return c.receive<int64_t>(what, Clock::now() + c.timeout) == 1;
}

int64_t TorchStoreClient::num_keys() {
  Connection& c = *connection_;
  std::lock_guard<std::mutex> lock(c.mutex);
  c.check_usable("num_keys()");
  c.send(Request(c.protocol, Query::GetNumKeys), "num_keys()", Clock::now() + c.timeout);
  return c.receive<int64_t>("num_keys()", Clock::now() + c.timeout);
}

std::string TorchStoreClient::local_address() const {
  const Connection& c = *connection_;
  std::lock_guard<std::mutex> lock(c.mutex);
  c.check_usable("local_address()");
  return detail::local_address(c.socket.fd());
}

}  // namespace ember::parallel
