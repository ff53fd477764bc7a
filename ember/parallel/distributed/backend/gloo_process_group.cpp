// The gloo backend (ember/parallel/distributed/backend/gloo_process_group.h): a Gloo context built
// through ember's store, a worker thread that runs the queued collectives,
// and the translation of Gloo's exceptions into ember::Errors.
#include "ember/parallel/distributed/backend/gloo_process_group.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <unistd.h>

#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>

#include "ember/core/error.h"
#include "ember/core/half.h"
#include "ember/core/ops.h"
#include "ember/parallel/distributed/collective_tracker.h"
#include "ember/parallel/distributed/store/prefix_store.h"

namespace ember::parallel {

namespace {

// Gloo's rendezvous reads and writes the group's store through this.
class StoreAdapter : public gloo::rendezvous::Store {
 public:
  explicit StoreAdapter(std::shared_ptr<parallel::Store> store) : store_(std::move(store)) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    std::string v = store_->get(key);
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { store_->wait(keys); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    store_->wait(keys, timeout);
  }

 private:
  std::shared_ptr<parallel::Store> store_;
};

// Max and min that return NaN when either side is NaN (torch.maximum's rule),
// whichever side it is on.
template <typename T>
T max_of(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return a < b ? b : a;
}
template <typename T>
T min_of(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return b < a ? b : a;
}

// The arithmetic type of a storage type: 16-bit floats compute in float.
template <typename T>
using Compute = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;

template <typename T>
gloo::AllreduceOptions::Func reduce_function(ReduceOp op) {
  using C = Compute<T>;
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return [](void* c, const void* a, const void* b, size_t n) {
        auto* out = static_cast<T*>(c);
        auto* x = static_cast<const T*>(a);
        auto* y = static_cast<const T*>(b);
        for (size_t i = 0; i < n; ++i) {
          if constexpr (std::is_integral_v<T>) {  // wraps on overflow, as NCCL's integer sums do, without UB
            out[i] = T(std::make_unsigned_t<T>(x[i]) + std::make_unsigned_t<T>(y[i]));
          } else {
            out[i] = T(C(x[i]) + C(y[i]));
          }
        }
      };
    case ReduceOp::Max:
      return [](void* c, const void* a, const void* b, size_t n) {
        auto* out = static_cast<T*>(c);
        auto* x = static_cast<const T*>(a);
        auto* y = static_cast<const T*>(b);
        for (size_t i = 0; i < n; ++i) out[i] = T(max_of<C>(C(x[i]), C(y[i])));
      };
    case ReduceOp::Min:
      return [](void* c, const void* a, const void* b, size_t n) {
        auto* out = static_cast<T*>(c);
        auto* x = static_cast<const T*>(a);
        auto* y = static_cast<const T*>(b);
        for (size_t i = 0; i < n; ++i) out[i] = T(min_of<C>(C(x[i]), C(y[i])));
      };
  }
  EMBER_FAIL("gloo: unknown reduce op");
}

// Calls f.template operator()<T>() with T the C++ type of a dtype gloo reduces.
template <typename F>
decltype(auto) dispatch(DType dtype, F&& f) {
  switch (dtype) {
    case DType::Float32: return f.template operator()<float>();
    case DType::Float64: return f.template operator()<double>();
    case DType::Float16: return f.template operator()<Half>();
    case DType::BFloat16: return f.template operator()<BFloat16>();
    case DType::Int32: return f.template operator()<int32_t>();
    case DType::Int64: return f.template operator()<int64_t>();
    case DType::Bool: break;
  }
  EMBER_FAIL("gloo: dtype " << dtype_name(dtype) << " is not supported");
}

// Divides n elements by `size` in place (ReduceOp::Avg, floating dtypes).
void divide(void* data, int64_t n, DType dtype, int size) {
  dispatch(dtype, [&]<typename T>() {
    if constexpr (std::is_floating_point_v<Compute<T>>) {
      auto* p = static_cast<T*>(data);
      for (int64_t i = 0; i < n; ++i) p[i] = T(Compute<T>(p[i]) / Compute<T>(size));
    }
  });
}

size_t nbytes(const Tensor& t) { return size_t(t.numel()) * t.element_size(); }

int64_t total_numel(const TensorList& ts) {
  int64_t n = 0;
  for (const Tensor& t : ts) n += t.numel();
  return n;
}

// One contiguous buffer for a list of contiguous tensors: the tensor itself
// when there is one, else a new one holding them end to end (filled from
// them when `fill`).
Tensor pack(const TensorList& ts, bool fill) {
  if (ts.size() == 1) return ts[0];
  Tensor flat = empty({total_numel(ts)}, ts[0].dtype());
  if (fill) {
    auto* p = static_cast<char*>(flat.data_ptr());
    for (const Tensor& t : ts) {
      std::memcpy(p, t.data_ptr(), nbytes(t));
      p += nbytes(t);
    }
  }
  return flat;
}

void unpack(const Tensor& flat, const TensorList& ts) {
  if (ts.size() == 1 && flat.is_same(ts[0])) return;
  auto* p = static_cast<const char*>(flat.data_ptr());
  for (const Tensor& t : ts) {
    std::memcpy(t.data_ptr(), p, nbytes(t));
    p += nbytes(t);
  }
}

// Whether the tensors lie end to end in memory, in order.
bool adjacent(const TensorList& ts) {
  auto* base = static_cast<const char*>(ts[0].data_ptr());
  for (size_t i = 0; i < ts.size(); ++i)
    if (static_cast<const char*>(ts[i].data_ptr()) != base + i * nbytes(ts[0])) return false;
  return true;
}

// Gloo's messages start with "[./gloo/...cc:598] "; the rest is the reason.
std::string gloo_reason(const char* what) {
  std::string s = what;
  if (!s.empty() && s[0] == '[') {
    size_t end = s.find("] ");
    if (end != std::string::npos) s = s.substr(end + 2);
  }
  return s;
}

std::string this_host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  EMBER_CHECK(gethostname(name, sizeof(name)) == 0, "gloo: gethostname failed");
  return name;
}

}  // namespace

struct GlooProcessGroup::Impl {
  GlooProcessGroup* group;
  std::shared_ptr<gloo::Context> context;
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<std::pair<Collective, std::shared_ptr<Work>>> queue;
  bool stopping = false;
  std::thread worker;

  uint32_t tag(const Collective& c) const { return uint32_t(c.seq & 0xffffffffu); }

  void all_reduce(Tensor& flat, const Collective& c) {
    gloo::AllreduceOptions opts(context);
    dispatch(flat.dtype(), [&]<typename T>() {
      opts.setOutput(static_cast<T*>(flat.data_ptr()), size_t(flat.numel()));
      opts.setReduceFunction(reduce_function<T>(c.op));
    });
    opts.setTag(tag(c));
    opts.setTimeout(group->timeout());
    gloo::allreduce(opts);
    if (c.op == ReduceOp::Avg) divide(flat.data_ptr(), flat.numel(), flat.dtype(), group->size());
  }

  void run(const Collective& c) {
    switch (c.kind) {
      case CollectiveKind::AllReduce: {
        if (total_numel(c.tensors) == 0) return;
        Tensor flat = pack(c.tensors, true);
        all_reduce(flat, c);
        unpack(flat, c.tensors);
        return;
      }
      case CollectiveKind::Broadcast: {
        if (total_numel(c.tensors) == 0) return;
        const bool root = group->rank() == c.root;
        Tensor flat = pack(c.tensors, root);
        gloo::BroadcastOptions opts(context);
        dispatch(flat.dtype(),
                 [&]<typename T>() { opts.setOutput(static_cast<T*>(flat.data_ptr()), size_t(flat.numel())); });
        opts.setRoot(c.root);
        opts.setTag(tag(c));
        opts.setTimeout(group->timeout());
        gloo::broadcast(opts);
        if (!root) unpack(flat, c.tensors);
        return;
      }
      case CollectiveKind::AllGather: {
        const Tensor& input = c.tensors[0];
        if (input.numel() == 0) return;
        const bool direct = adjacent(c.per_rank);
        Tensor out = direct ? Tensor() : empty({group->size() * input.numel()}, input.dtype());
        void* out_ptr = direct ? c.per_rank[0].data_ptr() : out.data_ptr();
        gloo::AllgatherOptions opts(context);
        dispatch(input.dtype(), [&]<typename T>() {
          // An input that already is this rank's block is left where it is.
          if (!direct || input.data_ptr() != c.per_rank[group->rank()].data_ptr())
            opts.setInput(static_cast<T*>(input.data_ptr()), size_t(input.numel()));
          opts.setOutput(static_cast<T*>(out_ptr), size_t(group->size() * input.numel()));
        });
        opts.setTag(tag(c));
        opts.setTimeout(group->timeout());
        gloo::allgather(opts);
        if (!direct) unpack(out, c.per_rank);
        return;
      }
      case CollectiveKind::ReduceScatter: {
        const Tensor& output = c.tensors[0];
        if (output.numel() == 0) return;
        // Always a copy: the all_reduce works in place and the inputs are the caller's.
        Tensor flat = empty({total_numel(c.per_rank)}, output.dtype());
        auto* p = static_cast<char*>(flat.data_ptr());
        for (const Tensor& t : c.per_rank) {
          std::memcpy(p, t.data_ptr(), nbytes(t));
          p += nbytes(t);
        }
        Collective sum = c;
        sum.op = c.op == ReduceOp::Avg ? ReduceOp::Sum : c.op;
        all_reduce(flat, sum);
        std::memcpy(output.data_ptr(), static_cast<char*>(flat.data_ptr()) + group->rank() * nbytes(output),
                    nbytes(output));
        if (c.op == ReduceOp::Avg) divide(output.data_ptr(), output.numel(), output.dtype(), group->size());
        return;
      }
      case CollectiveKind::Barrier: {
        gloo::BarrierOptions opts(context);
        opts.setTag(tag(c));
        opts.setTimeout(group->timeout());
        gloo::barrier(opts);
        return;
      }
    }
  }

  // The failed collective closes every connection of the group: the peers
  // blocked in it fail now instead of at their timeout.
  void fail(const Collective& c, Work& work, const std::string& cause) {
    try {
      context->closeConnections();
    } catch (const std::exception&) {  // already broken connections may refuse to close cleanly
    }
    work.finish(std::make_exception_ptr(Error(group->failure_message(c, cause))));
  }

  void execute(const Collective& c, Work& work) {
    std::string broken = group->broken_reason();
    if (!broken.empty()) {
      work.finish(std::make_exception_ptr(
          Error(std::string("gloo ") + c.str() + " on rank " + std::to_string(group->rank()) + " was not run: group '" +
                group->name() + "' is unusable since an earlier collective failed: " + broken)));
      return;
    }
    group->tracker().started(c);
    try {
      run(c);
      work.finish();
    } catch (const gloo::IoException& e) {
      fail(c, work, "Gloo I/O error: " + gloo_reason(e.what()));
    } catch (const gloo::EnforceNotMet& e) {
      fail(c, work, "Gloo check failed: " + gloo_reason(e.what()));
    } catch (const std::exception& e) {
      fail(c, work, gloo_reason(e.what()));
    }
  }

  void serve() {
    while (true) {
      std::pair<Collective, std::shared_ptr<Work>> item;
      {
        std::unique_lock<std::mutex> lock(mutex);
        wake.wait(lock, [&] { return stopping || !queue.empty(); });
        if (queue.empty()) return;  // stopping, and everything queued has run
        item = std::move(queue.front());
        queue.pop_front();
      }
      execute(item.first, *item.second);
    }
  }
};

GlooProcessGroup::GlooProcessGroup(const std::shared_ptr<Store>& store, int rank, int size,
                                   const ProcessGroupOptions& options)
    : ProcessGroup(store, rank, size, options), impl_(std::make_unique<Impl>()) {
  impl_->group = this;
  gloo::transport::tcp::attr attr;
  const char* env_iface = std::getenv("GLOO_SOCKET_IFNAME");
  std::string where;
  if (!options.gloo_interface.empty()) {
    attr.iface = options.gloo_interface;
    where = "interface " + attr.iface;
  } else if (env_iface != nullptr && *env_iface != '\0') {
    attr.iface = env_iface;
    where = "interface " + attr.iface + " (GLOO_SOCKET_IFNAME)";
  } else {
    attr.hostname = options.gloo_hostname.empty() ? this_host_name() : options.gloo_hostname;
    where = "address " + attr.hostname;
  }
  std::shared_ptr<gloo::transport::Device> device;
  try {
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    EMBER_FAIL("gloo group '" << name() << "', rank " << rank << ": cannot open Gloo's TCP transport on " << where
                              << ": " << gloo_reason(e.what())
                              << ". Set GLOO_SOCKET_IFNAME to the network interface to use (e.g. eth0)");
  }
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(timeout());
  StoreAdapter adapter(std::make_shared<PrefixStore>("gloo", this->store()));
  try {
    context->connectFullMesh(adapter, device);
  } catch (const std::exception& e) {
    EMBER_FAIL("gloo group '" << name() << "', rank " << rank << " of " << size << ": connecting to the other ranks "
                              << "failed (this rank listens on " << where << "): " << gloo_reason(e.what())
                              << ". If the ranks run on several hosts, each must reach the others on that address; "
                              << "set GLOO_SOCKET_IFNAME to the interface they share");
  }
  impl_->context = std::move(context);
  impl_->worker = std::thread([impl = impl_.get()] { impl->serve(); });
}

GlooProcessGroup::~GlooProcessGroup() {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->wake.notify_all();
  impl_->worker.join();
}

void GlooProcessGroup::check_tensors(const Collective& c) const {
  for (const TensorList* list : {&c.tensors, &c.per_rank}) {
    for (const Tensor& t : *list) {
      EMBER_CHECK(t.device().is_cpu(), "gloo " << c.str() << ": the gloo backend works on CPU tensors, but a tensor is "
                                               << "on " << t.device().str()
                                               << "; copy it to the CPU (t.cpu()) and the result back");
      EMBER_CHECK(t.dtype() != DType::Bool, "gloo " << c.str() << ": bool tensors are not supported");
    }
  }
}

std::shared_ptr<Work> GlooProcessGroup::launch(Collective c) {
  auto work = std::make_shared<Work>(collective_name(c.kind), c.seq);
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->queue.emplace_back(std::move(c), work);
  }
  impl_->wake.notify_one();
  return work;
}

}  // namespace ember::parallel
