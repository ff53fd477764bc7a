// ProcessGroup (ember/parallel/distributed/process_group.h): argument checks shared by every
// backend, numbering, the debug check, failure reports.
#include "ember/parallel/distributed/process_group.h"

#include <atomic>
#include <utility>

#include "ember/core/error.h"
#include "ember/core/ops/op_utils.h"
#include "ember/parallel/distributed/collective_tracker.h"
#include "ember/parallel/distributed/debug_check.h"
#include "ember/parallel/distributed/store/prefix_store.h"

namespace ember::parallel {

using ember::detail::describe;

namespace {

// Counts the groups of this process, for their default names.
std::atomic<uint64_t> groups_made{0};

// The rules every tensor list of a collective follows; `what` names the
// list in errors ("tensors", "outputs").
void check_list(const char* op, const TensorList& ts, const char* what) {
  EMBER_CHECK(!ts.empty(), op << ": the list of " << what << " is empty");
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    EMBER_CHECK(t.defined(), op << ": " << what << "[" << i << "] is an undefined tensor");
    EMBER_CHECK(t.dtype() != DType::Bool, op << ": " << what << "[" << i << "] is " << describe(t)
                                             << "; collectives do not take bool tensors (convert to int32 and back)");
    EMBER_CHECK(t.is_contiguous(), op << ": " << what << "[" << i << "] (" << describe(t) << ", strides "
                                      << shape_str(t.strides()) << ") is not contiguous; pass "
                                      << "t.contiguous() (and copy the result back where you need it)");
    EMBER_CHECK(t.dtype() == ts[0].dtype() && t.device() == ts[0].device(),
                op << ": " << what << "[" << i << "] is " << describe(t) << " but " << what << "[0] is "
                   << describe(ts[0]) << "; the tensors of one collective share a dtype and a device");
  }
}

void check_tensor(const char* op, const Tensor& t, const char* what) {
  EMBER_CHECK(t.defined(), op << ": the " << what << " is an undefined tensor");
  check_list(op, {t}, what);
}

// Each of `per_rank` (what: "outputs"/"inputs") must be shaped like `like`.
void check_per_rank(const char* op, const TensorList& per_rank, const char* what, const Tensor& like,
                    const char* like_what, int size) {
  EMBER_CHECK(int64_t(per_rank.size()) == size, op << ": got " << per_rank.size() << " " << what << " for a group of "
                                                   << size << " ranks; pass one per rank");
  check_list(op, per_rank, what);
  for (size_t i = 0; i < per_rank.size(); ++i) {
    EMBER_CHECK(per_rank[i].shape() == like.shape() && per_rank[i].dtype() == like.dtype() &&
                    per_rank[i].device() == like.device(),
                op << ": " << what << "[" << i << "] is " << describe(per_rank[i]) << " but the " << like_what << " is "
                   << describe(like) << "; each of the " << what << " must have the " << like_what
                   << "'s shape, dtype and device");
  }
}

void check_reduce_op(const char* op, ReduceOp reduce, DType dtype) {
  EMBER_CHECK(reduce != ReduceOp::Avg || is_floating(dtype),
              op << ": ReduceOp::Avg needs a floating dtype, got " << dtype_name(dtype)
                 << " (use ReduceOp::Sum and divide, choosing the rounding yourself)");
}

// The size() blocks of a flat tensor `whole` that holds one `part`-shaped
// tensor per rank: (size * part.size(0), ...) or (size, ...part's shape).
TensorList blocks(const char* op, const Tensor& whole, const char* whole_what, const Tensor& part,
                  const char* part_what, int size) {
  check_tensor(op, whole, whole_what);
  check_tensor(op, part, part_what);
  EMBER_CHECK(whole.dtype() == part.dtype() && whole.device() == part.device(),
              op << ": the " << whole_what << " is " << describe(whole) << " but the " << part_what << " is "
                 << describe(part) << "; they need the same dtype and device");
  Shape stacked = part.shape();
  stacked.insert(stacked.begin(), size);
  Shape concatenated = part.shape();
  if (!concatenated.empty()) concatenated[0] *= size;
  bool ok = whole.shape() == stacked || (!part.shape().empty() && whole.shape() == concatenated);
  EMBER_CHECK(ok, op << ": the " << whole_what << " is " << describe(whole) << " and the " << part_what << " is "
                     << describe(part) << "; for a group of " << size << " ranks the " << whole_what << " must be "
                     << shape_str(stacked)
                     << (part.shape().empty() ? std::string() : " or " + shape_str(concatenated)));
  Tensor rows = whole.view({size, part.numel()});
  TensorList out;
  for (int r = 0; r < size; ++r) out.push_back(rows[r].view(part.shape()));
  return out;
}

}  // namespace

ProcessGroup::ProcessGroup(const std::shared_ptr<Store>& store, int rank, int size, const ProcessGroupOptions& options)
    : rank_(rank), size_(size), timeout_(options.timeout) {
  const uint64_t number = groups_made++;
  name_ = options.name.empty() ? "pg" + std::to_string(number) : options.name;
  EMBER_CHECK(store, "process group " << name_ << ": the store is null");
  EMBER_CHECK(size >= 1, "process group " << name_ << ": the size must be at least 1, got " << size);
  EMBER_CHECK(rank >= 0 && rank < size,
              "process group " << name_ << ": rank " << rank << " is not in [0, " << size << ")");
  EMBER_CHECK(timeout_.count() > 0,
              "process group " << name_ << ": the timeout must be positive, got " << timeout_.count() << " ms");
  debug_ = options.debug ? *options.debug : distributed_debug_from_env();
  auto prefixed = std::make_shared<PrefixStore>("ember/pg/" + name_, store);
  prefixed->set_timeout(timeout_);
  store_ = prefixed;
  tracker_ = std::make_unique<CollectiveTracker>(store_, rank_, size_, timeout_, "'" + name_ + "'");
  tracker_->join();
}

ProcessGroup::~ProcessGroup() = default;

uint64_t ProcessGroup::sequence_number() const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  return seq_;
}

std::string ProcessGroup::broken_reason() const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  return broken_;
}

std::string ProcessGroup::failure_message(const Collective& c, const std::string& cause) {
  std::string message = std::string(backend()) + " " + c.str() + " failed on rank " + std::to_string(rank_) + " of " +
                        std::to_string(size_) + " (group '" + name_ + "', timeout " + std::to_string(timeout_.count()) +
                        " ms): " + cause + ". " + tracker_->arrival_report(c) + ".";
  std::lock_guard<std::mutex> lock(state_mutex_);
  if (broken_.empty()) broken_ = message;
  return message;
}

std::shared_ptr<Work> ProcessGroup::issue(Collective c) {
  std::lock_guard<std::mutex> issue_lock(issue_mutex_);
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    EMBER_CHECK(broken_.empty(), backend() << " " << c.signature() << " on rank " << rank_ << ": group '" << name_
                                           << "' is unusable since an earlier collective failed: " << broken_);
  }
  check_tensors(c);
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    c.seq = ++seq_;
  }
  if (debug_) check_same_collective(*tracker_, c);
  const TensorList& written = c.kind == CollectiveKind::AllGather ? c.per_rank : c.tensors;
  for (const Tensor& t : written) t.storage()->bump_version();
  return launch(std::move(c));
}

std::shared_ptr<Work> ProcessGroup::all_reduce(const Tensor& tensor, ReduceOp op) {
  check_tensor("all_reduce", tensor, "tensor");
  return all_reduce(TensorList{tensor}, op);
}

std::shared_ptr<Work> ProcessGroup::all_reduce(const TensorList& tensors, ReduceOp op) {
  check_list("all_reduce", tensors, "tensors");
  check_reduce_op("all_reduce", op, tensors[0].dtype());
  Collective c;
  c.kind = CollectiveKind::AllReduce;
  c.op = op;
  c.tensors = tensors;
  return issue(std::move(c));
}

std::shared_ptr<Work> ProcessGroup::broadcast(const Tensor& tensor, int root) {
  check_tensor("broadcast", tensor, "tensor");
  return broadcast(TensorList{tensor}, root);
}

std::shared_ptr<Work> ProcessGroup::broadcast(const TensorList& tensors, int root) {
  check_list("broadcast", tensors, "tensors");
  EMBER_CHECK(root >= 0 && root < size_, "broadcast: root " << root << " is not a rank of this group of " << size_
                                                            << " (valid: 0 to " << size_ - 1 << ")");
  Collective c;
  c.kind = CollectiveKind::Broadcast;
  c.root = root;
  c.tensors = tensors;
  return issue(std::move(c));
}

std::shared_ptr<Work> ProcessGroup::all_gather(const TensorList& outputs, const Tensor& input) {
  check_tensor("all_gather", input, "input");
  check_per_rank("all_gather", outputs, "outputs", input, "input", size_);
  Collective c;
  c.kind = CollectiveKind::AllGather;
  c.tensors = {input};
  c.per_rank = outputs;
  return issue(std::move(c));
}

std::shared_ptr<Work> ProcessGroup::all_gather_into_tensor(const Tensor& output, const Tensor& input) {
  return all_gather(blocks("all_gather_into_tensor", output, "output", input, "input", size_), input);
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter(const Tensor& output, const TensorList& inputs, ReduceOp op) {
  check_tensor("reduce_scatter", output, "output");
  check_per_rank("reduce_scatter", inputs, "inputs", output, "output", size_);
  check_reduce_op("reduce_scatter", op, output.dtype());
  Collective c;
  c.kind = CollectiveKind::ReduceScatter;
  c.op = op;
  c.tensors = {output};
  c.per_rank = inputs;
  return issue(std::move(c));
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter_tensor(const Tensor& output, const Tensor& input, ReduceOp op) {
  return reduce_scatter(output, blocks("reduce_scatter_tensor", input, "input", output, "output", size_), op);
}

std::shared_ptr<Work> ProcessGroup::barrier() {
  Collective c;
  c.kind = CollectiveKind::Barrier;
  return issue(std::move(c));
}

}  // namespace ember::parallel
