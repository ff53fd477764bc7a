// TorchStoreClient against a real PyTorch TCPStore server: Debian's
// python3-torch 1.13 (skipped when no python3 imports torch). Values go
// both ways through torch's worker prefix (/worker/attempt_0), get/add/
// compare_set/check/delete/num_keys answer as store.h says, a wait that
// times out names its keys and leaves the client usable. The same against
// a model of the 2.x server (VALIDATE first, 2.x numbering), and a port
// where ember's own store listens is recognized as not PyTorch's.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "ember/parallel/distributed/store/prefix_store.h"
#include "ember/parallel/distributed/store/tcp_store.h"
#include "ember/parallel/distributed/store/torch_store_client.h"
#include "support/error_message.h"

namespace ember::parallel {
namespace {

using namespace std::chrono_literals;
using testing::throws_with;

// Hosts a torch TCPStore on a free port, prints the port, sets one key
// through torch's worker prefix, then waits for ember's key and checks it.
constexpr const char* kServer = R"(
import sys, datetime
import torch.distributed as d
s = d.TCPStore("127.0.0.1", 0, 1, True, datetime.timedelta(seconds=60), wait_for_workers=False)
p = d.PrefixStore("/worker/attempt_0", s)
p.set("from_python", "hello")
print(s.port, flush=True)
p.wait(["from_ember"])
p.set("python_saw", p.get("from_ember"))
p.wait(["bye"])
)";

// A model of PyTorch 2.x's libuv server for the parts ember uses (the
// 2.x numbering, VALIDATE first: anything else before it is ignored, and
// WAIT blocks), so that the 2.x path runs here without torch 2.x.
constexpr const char* kServer2x = R"(
import socket, struct, threading
data, cv = {}, threading.Condition()
def serve(c):
    f = c.makefile("rb")
    def u64(): return struct.unpack("<Q", f.read(8))[0]
    def s(): return f.read(u64())
    def vec(b): c.sendall(struct.pack("<Q", len(b)) + b)
    validated = False
    while True:
        q = f.read(1)
        if not q: return
        q = q[0]
        if not validated:
            if q != 0: continue  # ignored, as the libuv server does
            assert struct.unpack("<I", f.read(4))[0] == 0x3C85F7CE
            validated = True
        elif q == 1:
            k, v = s(), s()
            with cv: data[k] = v; cv.notify_all()
        elif q == 2:
            k, exp, des = s(), s(), s()
            with cv:
                if k not in data: cur = des if exp == b"" else exp
                elif data[k] == exp: cur = des
                else: cur = data[k]
                if k not in data and exp == b"" or data.get(k) == exp: data[k] = cur; cv.notify_all()
            vec(cur)
        elif q == 3: vec(data[s()])
        elif q == 4:
            k = s(); d = struct.unpack("<q", f.read(8))[0]
            with cv: data[k] = str(int(data.get(k, b"0")) + d).encode(); n = int(data[k]); cv.notify_all()
            c.sendall(struct.pack("<q", n))
        elif q == 5:
            ks = [s() for _ in range(u64())]
            c.sendall(bytes([0 if all(k in data for k in ks) else 1]))
        elif q == 6:
            ks = [s() for _ in range(u64())]
            with cv: cv.wait_for(lambda: all(k in data for k in ks))
            c.sendall(bytes([0]))
        elif q == 7: c.sendall(struct.pack("<q", len(data)))
        elif q == 8:
            k = s()
            with cv: n = 1 if data.pop(k, None) is not None else 0
            c.sendall(struct.pack("<q", n))
        else: return
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen()
print(l.getsockname()[1], flush=True)
while True:
    c, _ = l.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
)";

// The first python3 that imports torch, or "".
std::string python_with_torch() {
  for (const char* python : {"python3", "/usr/bin/python3"}) {
    std::string cmd = std::string(python) + " -c 'import torch.distributed' >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return python;
  }
  return "";
}

// The protocol python's torch serves: 1.x's, or 2.x's with VALIDATE.
TorchStoreProtocol protocol_of(const std::string& python) {
  const std::string cmd = python + " -c 'import torch; print(torch.__version__)'";
  FILE* p = popen(cmd.c_str(), "r");
  char version[64] = {0};
  if (p == nullptr || fgets(version, sizeof version, p) == nullptr) ADD_FAILURE() << "cannot ask " << python;
  if (p != nullptr) pclose(p);
  return version[0] == '1' ? TorchStoreProtocol::WithoutValidate : TorchStoreProtocol::WithValidate;
}

class TorchServer {
 public:
  TorchServer(const std::string& python, const char* script = kServer) {
    int out[2];
    EXPECT_EQ(pipe(out), 0);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      close(out[0]);
      close(out[1]);
      execlp(python.c_str(), python.c_str(), "-c", script, static_cast<char*>(nullptr));
      _exit(127);
    }
    close(out[1]);
    FILE* f = fdopen(out[0], "r");
    if (fscanf(f, "%d", &port_) != 1) port_ = 0;
    fclose(f);
  }
  ~TorchServer() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  int port() const { return port_; }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

#define REQUIRE_TORCH(python)                     \
  const std::string python = python_with_torch(); \
  if (python.empty()) GTEST_SKIP() << "no python3 imports torch (apt-get install python3-torch)"

// Debian's torch 1.13 here (CI), torch 2.x on the GPU machine.
TEST(TorchStoreClient, TalksToPyTorchsServerThroughTheWorkerPrefix) {
  REQUIRE_TORCH(python);
  TorchServer server(python);
  ASSERT_GT(server.port(), 0);
  auto client = std::make_shared<TorchStoreClient>("127.0.0.1", server.port(), 10s);
  EXPECT_EQ(client->protocol(), protocol_of(python));
  EXPECT_EQ(client->local_address(), "127.0.0.1");
  PrefixStore store("/worker/attempt_0", client);
  EXPECT_EQ(store.get("from_python"), "hello");
  const std::string binary("a\0b\xff", 4);
  store.set("from_ember", binary);
  EXPECT_EQ(store.get("python_saw"), binary);

  EXPECT_EQ(store.add("n", 5), 5);
  EXPECT_EQ(store.add("n", -2), 3);
  EXPECT_EQ(store.get("n"), "3");
  EXPECT_TRUE(store.check({"n", "from_python"}));
  EXPECT_FALSE(store.check({"n", "absent"}));
  EXPECT_EQ(store.compare_set("cs", "", "first"), "first");
  EXPECT_EQ(store.compare_set("cs", "wrong", "second"), "first");
  EXPECT_EQ(store.compare_set("cs", "first", "second"), "second");
  EXPECT_EQ(store.compare_set("missing", "x", "y"), "");
  EXPECT_EQ(store.compare_set("missing", "x", "x"), "");
  EXPECT_FALSE(store.check({"missing"}));
  EXPECT_GE(store.num_keys(), 5);
  EXPECT_TRUE(store.delete_key("cs"));
  EXPECT_FALSE(store.delete_key("cs"));

  auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(throws_with(
      [&] {
        store.wait({"n", "never"}, 300ms);
      },
      {"wait([\"/worker/attempt_0/n\", \"/worker/attempt_0/never\"])", "1 of 2 keys", "not set within 300 ms",
       "\"/worker/attempt_0/never\""}));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  EXPECT_TRUE(throws_with([&] { store.get("never", 200ms); }, {"get(", "not set within 200 ms"}));
  // The timed-out waits left nothing behind: the client goes on.
  store.set("after", "ok");
  EXPECT_EQ(store.get("after"), "ok");
  store.set("bye", "");
}

TEST(TorchStoreClient, SpeaksThe2xNumberingAfterValidate) {
  if (std::system("python3 -c pass >/dev/null 2>&1") != 0) GTEST_SKIP() << "no python3";
  TorchServer server("python3", kServer2x);
  ASSERT_GT(server.port(), 0);
  auto start = std::chrono::steady_clock::now();
  TorchStoreClient a("127.0.0.1", server.port(), 10s);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 300ms);  // the probe's silence
  EXPECT_EQ(a.protocol(), TorchStoreProtocol::WithValidate);
  TorchStoreClient b("127.0.0.1", server.port(), 10s);
  std::thread writer([&] {
    std::this_thread::sleep_for(200ms);
    b.set("late", "v");
  });
  EXPECT_EQ(a.get("late"), "v");  // WAIT blocks until b sets it
  writer.join();
  EXPECT_EQ(a.add("n", 4), 4);
  EXPECT_EQ(b.get("n"), "4");
  EXPECT_TRUE(a.check({"late", "n"}));
  EXPECT_FALSE(a.check({"absent"}));
  EXPECT_EQ(a.compare_set("cs", "", "x"), "x");
  EXPECT_EQ(a.compare_set("cs", "x", "y"), "y");
  EXPECT_EQ(a.compare_set("gone", "x", "y"), "");
  EXPECT_EQ(a.num_keys(), 3);
  EXPECT_TRUE(a.delete_key("cs"));
  EXPECT_TRUE(throws_with([&] { a.wait({"never"}, 200ms); }, {"1 of 1 keys", "not set within 200 ms", "\"never\""}));
  a.set("after", "ok");  // on the new connection, validated again
  EXPECT_EQ(b.get("after"), "ok");
}

TEST(TorchStoreClient, EmbersOwnStoreIsNotPyTorchs) {
  TCPStore ember("127.0.0.1", 0, {.is_server = true, .timeout = 5s});
  EXPECT_TRUE(throws_with([&] { TorchStoreClient("127.0.0.1", ember.port(), 3s); },
                          {"answered neither as a PyTorch 2.x TCPStore nor as a 1.13 one", "use ember-run"}));
}

}  // namespace
}  // namespace ember::parallel
