// TCPStore and PrefixStore: values across clients, blocking get, atomic add
// from many threads and processes, compare_set, check/delete/num_keys, the
// timeout errors of get and wait, connecting with retries and its timeout
// error, a server that goes away, a port where something else listens, and
// a server that keeps serving while one client waits or misbehaves.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>
#include <thread>
#include <vector>

#include "ember/parallel/distributed/store/prefix_store.h"
#include "ember/parallel/distributed/store/socket.h"
#include "ember/parallel/distributed/store/tcp_store.h"
#include "support/error_message.h"
#include "support/multiprocess.h"

namespace ember::parallel {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::throws_with;

TCPStore make_server(std::chrono::milliseconds timeout = 5s) {
  return TCPStore("127.0.0.1", 0, {.is_server = true, .timeout = timeout});
}

std::unique_ptr<TCPStore> client_of(const TCPStore& server, std::chrono::milliseconds timeout = 5s) {
  return std::make_unique<TCPStore>("127.0.0.1", server.port(), TCPStoreOptions{.timeout = timeout});
}

int64_t ms_since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

TEST(TCPStore, ServerPicksAFreePortAndClientsShareValues) {
  TCPStore server = make_server();
  EXPECT_GT(server.port(), 0);
  EXPECT_TRUE(server.is_server());
  auto client = client_of(server);
  EXPECT_FALSE(client->is_server());
  const std::string binary("a\0b\xff", 4);
  server.set("k", binary);
  EXPECT_EQ(client->get("k"), binary);
  client->set("k", "replaced");
  EXPECT_EQ(server.get("k"), "replaced");
  client->set("empty", "");
  EXPECT_EQ(server.get("empty"), "");
  EXPECT_EQ(client->local_address(), "127.0.0.1");
}

TEST(TCPStore, GetWaitsUntilTheKeyIsSet) {
  TCPStore server = make_server();
  auto writer = client_of(server);
  std::thread t([&] {
    std::this_thread::sleep_for(100ms);
    writer->set("late", "here");
  });
  auto start = Clock::now();
  EXPECT_EQ(server.get("late"), "here");
  EXPECT_GE(ms_since(start), 90);
  t.join();
}

TEST(TCPStore, AddIsAtomicAcrossConcurrentClients) {
  TCPStore server = make_server();
  constexpr int kThreads = 4, kAdds = 200;
  std::vector<std::vector<int64_t>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      auto client = client_of(server);  // one connection per thread
      for (int k = 0; k < kAdds; ++k) seen[i].push_back(client->add("count", 1));
    });
  }
  for (auto& t : threads) t.join();
  std::set<int64_t> all;
  for (const auto& v : seen) all.insert(v.begin(), v.end());
  // Every add saw a distinct value: 1 .. kThreads * kAdds exactly once each.
  ASSERT_EQ(all.size(), size_t(kThreads * kAdds));
  EXPECT_EQ(*all.begin(), 1);
  EXPECT_EQ(*all.rbegin(), kThreads * kAdds);
  EXPECT_EQ(server.get("count"), std::to_string(kThreads * kAdds));
  EXPECT_EQ(server.add("count", -5), kThreads * kAdds - 5);
  EXPECT_EQ(server.add("fresh", 0), 0);
}

TEST(TCPStore, AddCountsAcrossProcesses) {
  constexpr int kRanks = 4, kAdds = 50;
  auto results = testing::run_ranks(kRanks, [](testing::RankContext& ctx) {
    for (int k = 0; k < kAdds; ++k) ctx.store->add("hits", 1);
    ctx.store->set("done/" + std::to_string(ctx.rank), "1");
    std::vector<std::string> keys;
    for (int r = 0; r < ctx.world_size; ++r) keys.push_back("done/" + std::to_string(r));
    ctx.store->wait(keys);
    EXPECT_EQ(ctx.store->get("hits"), std::to_string(kRanks * kAdds));
  });
  EXPECT_TRUE(testing::all_passed(results));
}

TEST(TCPStore, AddOnANonIntegerValueIsAnError) {
  TCPStore server = make_server();
  server.set("text", "abc");
  EXPECT_TRUE(throws_with([&] { server.add("text", 1); }, {"add(\"text\", 1)", "not an integer"}));
  EXPECT_EQ(server.get("text"), "abc");
}

TEST(TCPStore, CompareSet) {
  TCPStore server = make_server();
  // A missing key matches an empty expected value.
  EXPECT_EQ(server.compare_set("k", "", "first"), "first");
  EXPECT_EQ(server.get("k"), "first");
  // A mismatch leaves the value and returns it.
  EXPECT_EQ(server.compare_set("k", "wrong", "second"), "first");
  EXPECT_EQ(server.get("k"), "first");
  // A match swaps.
  EXPECT_EQ(server.compare_set("k", "first", "second"), "second");
  EXPECT_EQ(server.get("k"), "second");
  // A missing key with a non-empty expected value stays missing.
  EXPECT_EQ(server.compare_set("absent", "x", "y"), "");
  EXPECT_FALSE(server.check({"absent"}));
}

TEST(TCPStore, CompareSetElectsExactlyOneWinner) {
  TCPStore server = make_server();
  constexpr int kThreads = 4;
  std::atomic<int> winners{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      auto client = client_of(server);
      std::string me = "thread" + std::to_string(i);
      if (client->compare_set("leader", "", me) == me) ++winners;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(winners.load(), 1);
}

TEST(TCPStore, CheckDeleteAndNumKeys) {
  TCPStore server = make_server();
  auto client = client_of(server);
  EXPECT_EQ(client->num_keys(), 0);
  client->set("a", "1");
  client->set("b", "2");
  EXPECT_EQ(server.num_keys(), 2);
  EXPECT_TRUE(server.check({"a", "b"}));
  EXPECT_FALSE(server.check({"a", "c"}));
  EXPECT_TRUE(server.delete_key("a"));
  EXPECT_FALSE(server.delete_key("a"));
  EXPECT_FALSE(client->check({"a"}));
  EXPECT_EQ(client->num_keys(), 1);
}

TEST(TCPStore, WaitTimeoutNamesTheMissingKeys) {
  TCPStore server = make_server();
  server.set("present", "1");
  auto start = Clock::now();
  EXPECT_TRUE(throws_with(
      [&] {
        server.wait({"present", "absent"}, 200ms);
      },
      {"wait", "1 of 2 keys were not set within 200 ms", "\"absent\"", "127.0.0.1:" + std::to_string(server.port())}));
  int64_t waited = ms_since(start);
  EXPECT_GE(waited, 190);
  EXPECT_LT(waited, 3000);
  // The connection is still usable after a timeout.
  server.wait({"present"}, 200ms);
  EXPECT_EQ(server.get("present"), "1");
}

TEST(TCPStore, GetTimeoutUsesTheStoreTimeout) {
  TCPStore server = make_server(150ms);
  auto start = Clock::now();
  EXPECT_TRUE(throws_with([&] { server.get("never"); }, {"get(\"never\")", "not set within 150 ms", "every rank"}));
  EXPECT_GE(ms_since(start), 140);
  EXPECT_TRUE(throws_with([&] { server.get("never", 50ms); }, {"not set within 50 ms"}));
}

TEST(TCPStore, ServerKeepsServingWhileAClientWaits) {
  TCPStore server = make_server();
  auto waiter = client_of(server);
  auto other = client_of(server);
  std::atomic<bool> got{false};
  std::thread t([&] {
    EXPECT_EQ(waiter->get("signal", 5000ms), "go");
    got = true;
  });
  auto start = Clock::now();
  for (int i = 0; i < 50; ++i) other->set("busy" + std::to_string(i), "x");
  EXPECT_EQ(other->get("busy49"), "x");
  EXPECT_LT(ms_since(start), 1000);
  EXPECT_FALSE(got.load());
  other->set("signal", "go");
  t.join();
  EXPECT_TRUE(got.load());
}

TEST(TCPStore, ConnectTimeoutNamesTheAddress) {
  const int port = detail::free_port();  // nothing listens there
  auto start = Clock::now();
  EXPECT_TRUE(throws_with([&] { TCPStore("127.0.0.1", port, {.timeout = 300ms}); },
                          {"could not connect to 127.0.0.1:" + std::to_string(port), "Connection refused",
                           "MASTER_ADDR and MASTER_PORT", "rank 0"}));
  int64_t waited = ms_since(start);
  EXPECT_GE(waited, 290);
  EXPECT_LT(waited, 3000);
}

TEST(TCPStore, ClientRetriesUntilTheServerStarts) {
  const int port = detail::free_port();
  std::unique_ptr<TCPStore> client;
  std::thread t([&] { client = std::make_unique<TCPStore>("127.0.0.1", port, TCPStoreOptions{.timeout = 10s}); });
  std::this_thread::sleep_for(300ms);  // the client is retrying meanwhile
  TCPStore server("127.0.0.1", port, {.is_server = true, .timeout = 5s});
  t.join();
  ASSERT_TRUE(client);
  client->set("k", "v");
  EXPECT_EQ(server.get("k"), "v");
}

TEST(TCPStore, ServerOnABusyPortSaysSo) {
  TCPStore server = make_server();
  EXPECT_TRUE(throws_with([&] { TCPStore("127.0.0.1", server.port(), {.is_server = true, .timeout = 1s}); },
                          {"rank 0 cannot serve the store", "Address already in use", "MASTER_PORT"}));
}

TEST(TCPStore, LostServerIsReportedOnEveryCall) {
  auto server = std::make_unique<TCPStore>("127.0.0.1", 0, TCPStoreOptions{.is_server = true, .timeout = 2s});
  auto client = client_of(*server, 2s);
  client->set("k", "v");
  const std::string where = "127.0.0.1:" + std::to_string(server->port());
  server.reset();
  EXPECT_TRUE(throws_with([&] { client->get("k"); }, {where, "connection to the store server was lost", "rank 0"}));
  EXPECT_TRUE(throws_with([&] { client->set("k", "v"); }, {where, "unusable since an earlier error"}));
}

TEST(TCPStore, SomethingElseOnThePortIsRecognized) {
  detail::Listener l = detail::listen_tcp("127.0.0.1", 0);
  std::thread fake([&] {
    int fd = ::accept(l.socket.fd(), nullptr, nullptr);
    const char reply[] = "HTTP/1.0 400 Bad Request\r\n\r\n";
    (void)!::write(fd, reply, sizeof(reply) - 1);
    ::close(fd);
  });
  EXPECT_TRUE(throws_with([&] { TCPStore("127.0.0.1", l.port, {.timeout = 2s}); },
                          {"127.0.0.1:" + std::to_string(l.port), "did not answer as an ember store"}));
  fake.join();
}

TEST(TCPStore, ServerDropsAGarbageClientAndServesTheOthers) {
  TCPStore server = make_server();
  detail::Socket raw = detail::connect_with_retry("127.0.0.1", server.port(), Clock::now() + 2s, "");
  const char garbage[] = "GET / HTTP/1.0\r\n\r\n";  // not a Hello: dropped
  ASSERT_TRUE(detail::send_all(raw.fd(), garbage, sizeof(garbage) - 1, Clock::now() + 1s).ok());
  char byte;
  detail::IoResult r = detail::recv_all(raw.fd(), &byte, 1, Clock::now() + 2s);
  EXPECT_EQ(r.status, detail::IoStatus::Closed);
  auto client = client_of(server);
  client->set("still", "works");
  EXPECT_EQ(server.get("still"), "works");
}

TEST(TCPStore, RejectsBadArguments) {
  EXPECT_TRUE(throws_with([] { TCPStore("", 1234); }, {"host is empty", "MASTER_ADDR"}));
  EXPECT_TRUE(throws_with([] { TCPStore("127.0.0.1", 70000); }, {"port 70000"}));
  EXPECT_TRUE(throws_with([] { TCPStore("127.0.0.1", 0); }, {"port 0", "server"}));
}

TEST(PrefixStore, KeepsKeysApart) {
  auto server = std::make_shared<TCPStore>("127.0.0.1", 0, TCPStoreOptions{.is_server = true, .timeout = 2s});
  PrefixStore a("a", server), b("b", server);
  a.set("k", "from a");
  b.set("k", "from b");
  EXPECT_EQ(a.get("k"), "from a");
  EXPECT_EQ(b.get("k"), "from b");
  EXPECT_EQ(server->get("a/k"), "from a");
  EXPECT_EQ(a.add("n", 2), 2);
  EXPECT_TRUE(a.check({"k", "n"}));
  EXPECT_FALSE(b.check({"n"}));
  EXPECT_EQ(a.compare_set("k", "from a", "new"), "new");
  EXPECT_TRUE(a.delete_key("k"));
  EXPECT_FALSE(server->check({"a/k"}));
  EXPECT_EQ(a.timeout(), 2s);
  a.set_timeout(100ms);
  EXPECT_TRUE(throws_with([&] { a.wait({"missing"}); }, {"\"a/missing\"", "100 ms"}));
}

}  // namespace
}  // namespace ember::parallel
