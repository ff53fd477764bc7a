// TCPStore's client (ember/parallel/distributed/store/tcp_store.h): one connection, one request in
// flight at a time, every failure turned into an ember::Error that names the
// store's address.
#include "ember/parallel/distributed/store/tcp_store.h"

#include <sstream>
#include <utility>

#include "ember/core/error.h"
#include "ember/parallel/distributed/store/socket.h"
#include "ember/parallel/distributed/store/store_protocol.h"
#include "ember/parallel/distributed/store/tcp_store_server.h"

namespace ember::parallel {

using detail::Clock;
using detail::FrameReader;
using detail::FrameWriter;
using detail::StoreCommand;
using detail::StoreStatus;

namespace {

// How long past a get()/wait() timeout the client waits for the server's
// Timeout answer before it calls the server unresponsive.
constexpr auto kAnswerGrace = std::chrono::seconds(5);

std::string quoted(const std::string& key) { return "\"" + key + "\""; }

std::string quoted(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size(); ++i) out += (i ? ", " : "") + quoted(keys[i]);
  return out;
}

}  // namespace

struct TCPStore::Connection {
  detail::Socket socket;
  std::mutex mutex;
  std::string broken;  // why the connection is unusable; empty while it works
  std::string where;   // "host:port"
  std::string server;  // the process serving the store: "rank 0", "ember-run"

  // Sends one request frame and returns the reply payload. `what` names the
  // call in errors (get("key")).
  std::string request(const std::string& frame, const std::string& what, Clock::time_point deadline) {
    std::lock_guard<std::mutex> lock(mutex);
    EMBER_CHECK(broken.empty(), "TCPStore " << what << " at " << where << ": the store is unusable since an earlier "
                                            << "error: " << broken);
    detail::IoResult io = detail::send_all(socket.fd(), frame.data(), frame.size(), deadline);
    char header[4];
    if (io.ok()) io = detail::recv_all(socket.fd(), header, 4, deadline);
    std::string payload;
    if (io.ok()) {
      uint32_t len = detail::frame_length(header);
      if (len == 0 || len > detail::kMaxStoreFrame) {
        fail(what, "the server sent a malformed answer (a frame of " + std::to_string(len) + " bytes)");
      }
      payload.resize(len);
      io = detail::recv_all(socket.fd(), payload.data(), len, deadline);
    }
    if (io.status == detail::IoStatus::Closed) {
      fail(what, "the connection to the store server was lost (" + io.error + "). The server runs in " + server +
                     "'s process: " + server + " has probably exited or crashed; look at its output first");
    }
    if (io.status == detail::IoStatus::Timeout) {
      fail(what, "the store server did not answer in time (" + io.error + "); " + server +
                     "'s process, which serves it, may be stopped or overloaded");
    }
    return payload;
  }

  [[noreturn]] void fail(const std::string& what, const std::string& why) {
    broken = why;
    socket.close();
    EMBER_FAIL("TCPStore " << what << " at " << where << ": " << why);
  }
};

TCPStore::TCPStore(std::string host, int port, TCPStoreOptions options)
    : Store(options.timeout), host_(std::move(host)), port_(port) {
  EMBER_CHECK(!host_.empty(), "TCPStore: the host is empty (set MASTER_ADDR to rank 0's address)");
  EMBER_CHECK(port >= 0 && port <= 65535, "TCPStore: port " << port << " is not in [0, 65535]");
  EMBER_CHECK(options.is_server || port > 0,
              "TCPStore: a client needs the server's port; port 0 (pick a free port) "
              "is for the server");
  EMBER_CHECK(options.timeout.count() >= 0,
              "TCPStore: the timeout must not be negative, got " << options.timeout.count() << " ms");
  const auto deadline = Clock::now() + options.timeout;
  if (options.is_server) {
    try {
      server_ = std::make_unique<detail::TCPStoreServer>(host_, port);
    } catch (const Error& e) {
      EMBER_FAIL("TCPStore: rank 0 cannot serve the store: " << e.what());
    }
    port_ = server_->port();
  }
  connection_ = std::make_unique<Connection>();
  connection_->where = host_ + ":" + std::to_string(port_);
  connection_->server = options.server;
  connection_->socket = detail::connect_with_retry(
      host_, port_, deadline,
      "TCPStore: check that " + options.server +
          " is running and serves the store there: MASTER_ADDR and "
          "MASTER_PORT must name its host and a port it can listen on, the same on every rank, and no firewall may "
          "block the port");
  // A frame that is not an ember store's answer, or none at all within the
  // time left (at least a second), means something else listens there.
  const auto hello_deadline = std::max(deadline, Clock::now() + std::chrono::seconds(1));
  std::string reply;
  try {
    reply = connection_->request(FrameWriter().u8(uint8_t(StoreCommand::Hello)).bytes(detail::kStoreMagic).finish(),
                                 "handshake", hello_deadline);
    FrameReader r(reply);
    EMBER_CHECK(StoreStatus(r.u8()) == StoreStatus::Ok && r.bytes() == detail::kStoreMagic, "bad answer");
  } catch (const Error&) {
    EMBER_FAIL("TCPStore: " << connection_->where << " accepted the connection but did not answer as an ember store "
                            << "(another program listens on that port, or an incompatible ember version)");
  }
}

TCPStore::~TCPStore() = default;

void TCPStore::set(const std::string& key, const std::string& value) {
  std::string r = connection_->request(FrameWriter().u8(uint8_t(StoreCommand::Set)).bytes(key).bytes(value).finish(),
                                       "set(" + quoted(key) + ")", Clock::now() + timeout());
  EMBER_CHECK(!r.empty() && StoreStatus(r[0]) == StoreStatus::Ok,
              "TCPStore set(" << quoted(key) << "): unexpected answer");
}

std::string TCPStore::get_for(const std::string& key, std::chrono::milliseconds timeout) {
  const std::string what = "get(" + quoted(key) + ")";
  std::string reply =
      connection_->request(FrameWriter().u8(uint8_t(StoreCommand::Get)).bytes(key).i64(timeout.count()).finish(), what,
                           Clock::now() + timeout + kAnswerGrace);
  FrameReader r(reply);
  auto status = StoreStatus(r.u8());
  EMBER_CHECK(status != StoreStatus::Timeout,
              "TCPStore " << what << " at " << connection_->where << ": the key was not set within " << timeout.count()
                          << " ms. The rank that should set it has not got there: is every rank running, and do all "
                          << "of them use this store (the same MASTER_ADDR and MASTER_PORT)?");
  EMBER_CHECK(status == StoreStatus::Value, "TCPStore " << what << ": unexpected answer from the server");
  return r.bytes();
}

int64_t TCPStore::add(const std::string& key, int64_t delta) {
  const std::string what = "add(" + quoted(key) + ", " + std::to_string(delta) + ")";
  std::string reply = connection_->request(FrameWriter().u8(uint8_t(StoreCommand::Add)).bytes(key).i64(delta).finish(),
                                           what, Clock::now() + timeout());
  FrameReader r(reply);
  auto status = StoreStatus(r.u8());
  EMBER_CHECK(status != StoreStatus::Error, "TCPStore " << what << ": " << r.bytes());
  EMBER_CHECK(status == StoreStatus::Int, "TCPStore " << what << ": unexpected answer from the server");
  return r.i64();
}

std::string TCPStore::compare_set(const std::string& key, const std::string& expected, const std::string& desired) {
  const std::string what = "compare_set(" + quoted(key) + ")";
  std::string reply = connection_->request(
      FrameWriter().u8(uint8_t(StoreCommand::CompareSet)).bytes(key).bytes(expected).bytes(desired).finish(), what,
      Clock::now() + timeout());
  FrameReader r(reply);
  EMBER_CHECK(StoreStatus(r.u8()) == StoreStatus::Value, "TCPStore " << what << ": unexpected answer from the server");
  return r.bytes();
}

void TCPStore::wait_for(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const std::string what = "wait([" + quoted(keys) + "])";
  std::string reply =
      connection_->request(FrameWriter().u8(uint8_t(StoreCommand::Wait)).keys(keys).i64(timeout.count()).finish(), what,
                           Clock::now() + timeout + kAnswerGrace);
  FrameReader r(reply);
  auto status = StoreStatus(r.u8());
  if (status == StoreStatus::Timeout) {
    std::vector<std::string> missing = r.keys();
    EMBER_FAIL("TCPStore " << what << " at " << connection_->where << ": " << missing.size() << " of " << keys.size()
                           << " keys were not set within " << timeout.count() << " ms: " << quoted(missing)
                           << ". Is every rank running, and do all of them use this store?");
  }
  EMBER_CHECK(status == StoreStatus::Ok, "TCPStore " << what << ": unexpected answer from the server");
}

bool TCPStore::check(const std::vector<std::string>& keys) {
  const std::string what = "check([" + quoted(keys) + "])";
  std::string reply = connection_->request(FrameWriter().u8(uint8_t(StoreCommand::Check)).keys(keys).finish(), what,
                                           Clock::now() + timeout());
  FrameReader r(reply);
  EMBER_CHECK(StoreStatus(r.u8()) == StoreStatus::Int, "TCPStore " << what << ": unexpected answer from the server");
  return r.i64() != 0;
}

bool TCPStore::delete_key(const std::string& key) {
  const std::string what = "delete_key(" + quoted(key) + ")";
  std::string reply = connection_->request(FrameWriter().u8(uint8_t(StoreCommand::Delete)).bytes(key).finish(), what,
                                           Clock::now() + timeout());
  FrameReader r(reply);
  EMBER_CHECK(StoreStatus(r.u8()) == StoreStatus::Int, "TCPStore " << what << ": unexpected answer from the server");
  return r.i64() != 0;
}

int64_t TCPStore::num_keys() {
  std::string reply = connection_->request(FrameWriter().u8(uint8_t(StoreCommand::NumKeys)).finish(), "num_keys()",
                                           Clock::now() + timeout());
  FrameReader r(reply);
  EMBER_CHECK(StoreStatus(r.u8()) == StoreStatus::Int, "TCPStore num_keys(): unexpected answer from the server");
  return r.i64();
}

std::string TCPStore::local_address() const {
  std::lock_guard<std::mutex> lock(connection_->mutex);
  EMBER_CHECK(connection_->broken.empty(), "TCPStore at " << connection_->where << ": the store is unusable since an "
                                                          << "earlier error: " << connection_->broken);
  return detail::local_address(connection_->socket.fd());
}

}  // namespace ember::parallel
