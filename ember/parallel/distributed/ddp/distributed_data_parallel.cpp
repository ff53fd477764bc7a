// DistributedDataParallel (ember/parallel/distributed/ddp/distributed_data_parallel.h): the
// construction-time model check and broadcast, the forward's buffer
// broadcast, and the reducer's calls around each forward.
//
// The model check costs one all_gather of 16 bytes per rank when the ranks
// agree: a 64-bit FNV-1a hash and the length of the text that describes the
// module's tensors. Only when they differ do the ranks all_gather the texts
// themselves (one int32 per character), so that each rank can name the
// first difference.
#include "ember/parallel/distributed/ddp/distributed_data_parallel.h"

#include <algorithm>
#include <optional>
#include <sstream>
#include <utility>

#include "ember/core/grad_mode.h"
#include "ember/core/ops.h"
#include "ember/core/ops/op_utils.h"
#include "ember/parallel/distributed/init.h"

namespace ember::parallel {

using ember::detail::describe;

namespace {

// One line per parameter and buffer, in the module's order: what every rank
// must agree on (no device: the ranks use different GPUs).
std::vector<std::string> describe_module(const nn::Module& module) {
  std::vector<std::string> lines;
  for (const auto& p : module.named_parameters()) {
    lines.push_back("parameter '" + p.key + "' " + shape_str(p.value.shape()) + " " + dtype_name(p.value.dtype()) +
                    (p.value.requires_grad() ? "" : " (requires_grad=false)"));
  }
  for (const auto& b : module.named_buffers()) {
    lines.push_back("buffer '" + b.key + "' " + shape_str(b.value.shape()) + " " + dtype_name(b.value.dtype()));
  }
  return lines;
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// The error naming the first rank whose description differs from rank 0's,
// and the first line where it does.
std::string first_difference(const std::vector<std::vector<std::string>>& ranks) {
  const std::vector<std::string>& base = ranks[0];
  for (size_t r = 1; r < ranks.size(); ++r) {
    const std::vector<std::string>& mine = ranks[r];
    for (size_t k = 0; k < std::max(base.size(), mine.size()); ++k) {
      if (k < base.size() && k < mine.size() && base[k] == mine[k]) continue;
      std::ostringstream msg;
      msg << "DistributedDataParallel: the ranks wrap different models: rank " << r;
      if (k >= base.size()) {
        msg << " has the extra " << mine[k] << " that rank 0 lacks";
      } else if (k >= mine.size()) {
        msg << " lacks the " << base[k] << " of rank 0";
      } else {
        msg << " has " << mine[k] << " where rank 0 has " << base[k];
      }
      msg << " (entry " << k << " of the parameters, then buffers). Every rank must construct the same model, "
          << "with the same parameter names, shapes and dtypes, before wrapping it";
      return msg.str();
    }
  }
  return "DistributedDataParallel: the ranks' model descriptions hash differently but read the same (an ember bug)";
}

// Collectives run on `device` (the module's: a GPU backend takes GPU tensors only).
void verify_same_model(ProcessGroup& group, const nn::Module& module, Device device) {
  const std::string text = join_lines(describe_module(module));
  Tensor mine = from_vector<int64_t>({int64_t(fnv1a(text)), int64_t(text.size())}).to(device);
  Tensor all = zeros({group.size(), 2}, DType::Int64, device);
  group.all_gather_into_tensor(all, mine)->wait();
  std::vector<int64_t> summary = to_vector<int64_t>(all.cpu());
  int64_t longest = 0;
  bool same = true;
  for (int r = 0; r < group.size(); ++r) {
    same = same && summary[2 * r] == summary[0] && summary[2 * r + 1] == summary[1];
    longest = std::max(longest, summary[2 * r + 1]);
  }
  if (same) return;
  // Characters as int32 (collectives take no bytes), padded with -1.
  std::vector<int32_t> chars(size_t(std::max<int64_t>(longest, 1)), -1);
  for (size_t i = 0; i < text.size(); ++i) chars[i] = int32_t(static_cast<unsigned char>(text[i]));
  Tensor mine_text = from_vector<int32_t>(chars).to(device);
  Tensor all_text = zeros({group.size(), int64_t(chars.size())}, DType::Int32, device);
  group.all_gather_into_tensor(all_text, mine_text)->wait();
  std::vector<int32_t> gathered = to_vector<int32_t>(all_text.cpu());
  std::vector<std::vector<std::string>> ranks;
  for (int r = 0; r < group.size(); ++r) {
    std::string s;
    for (size_t i = 0; i < chars.size(); ++i) {
      int32_t c = gathered[size_t(r) * chars.size() + i];
      if (c < 0) break;
      s.push_back(char(c));
    }
    ranks.push_back(split_lines(s));
  }
  EMBER_FAIL(first_difference(ranks));
}

// Broadcasts tensors from rank 0 in place, one collective per dtype. Bool
// tensors travel as int32 and non-contiguous ones through a contiguous copy.
void broadcast_from_rank0(ProcessGroup& group, const TensorList& tensors) {
  NoGradGuard no_grad;
  std::vector<std::pair<DType, std::vector<size_t>>> by_dtype;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const DType wire = tensors[i].dtype() == DType::Bool ? DType::Int32 : tensors[i].dtype();
    auto it = std::find_if(by_dtype.begin(), by_dtype.end(), [&](const auto& g) { return g.first == wire; });
    if (it == by_dtype.end()) {
      by_dtype.push_back({wire, {}});
      it = by_dtype.end() - 1;
    }
    it->second.push_back(i);
  }
  std::vector<TensorList> sent;
  std::vector<std::shared_ptr<Work>> works;
  for (const auto& [wire, indices] : by_dtype) {
    TensorList list;
    for (size_t i : indices) {
      Tensor t = tensors[i].detach();
      if (t.dtype() != wire) t = t.to(wire);
      if (!t.is_contiguous()) t = t.contiguous();
      list.push_back(t);
    }
    works.push_back(group.broadcast(list, 0));
    sent.push_back(std::move(list));
  }
  for (auto& w : works) w->wait();
  for (size_t g = 0; g < by_dtype.size(); ++g) {
    const std::vector<size_t>& indices = by_dtype[g].second;
    for (size_t k = 0; k < indices.size(); ++k) {
      Tensor target = tensors[indices[k]];
      const Tensor& got = sent[g][k];
      if (got.storage() != target.storage()) target.copy_(got);
    }
  }
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 std::shared_ptr<ProcessGroup> group,
                                                 DistributedDataParallelOptions options)
    : module_(std::move(module)), group_(std::move(group)), options_(options) {
  EMBER_CHECK(module_ != nullptr, "DistributedDataParallel: the module is null");
  if (!group_) group_ = default_group();
  register_module("module", module_);
  train(module_->is_training());

  // One device for everything, checked before any collective.
  std::optional<std::pair<std::string, Device>> first;
  auto check_device = [&](const char* what, const std::string& name, const Tensor& t) {
    if (!first) {
      first.emplace(std::string(what) + " '" + name + "'", t.device());
      return;
    }
    EMBER_CHECK(t.device() == first->second,
                "DistributedDataParallel: the module must have its parameters and buffers on one device, but "
                    << first->first << " is on " << first->second << " and " << what << " '" << name << "' on "
                    << t.device() << "; move the module there with module->to(device) before wrapping it");
  };
  nn::OrderedDict<Tensor> params = module_->named_parameters();
  for (const auto& p : params) check_device("parameter", p.key, p.value);
  nn::OrderedDict<Tensor> buffers = module_->named_buffers();
  for (const auto& b : buffers) check_device("buffer", b.key, b.value);

  TensorList trained;
  std::vector<std::string> names;
  for (const auto& p : params) {
    if (!p.value.requires_grad()) continue;
    trained.push_back(p.value);
    names.push_back(p.key);
  }
  EMBER_CHECK(!trained.empty(), "DistributedDataParallel: " << module_->name()
                                                            << " has no parameter that requires grad, so there is "
                                                               "nothing to synchronize; DDP is not needed for it");
  for (size_t i = 0; i < trained.size(); ++i) {
    EMBER_CHECK(trained[i].is_non_overlapping_and_dense(), "DistributedDataParallel: parameter '"
                                                               << names[i] << "' (" << describe(trained[i])
                                                               << ", strides " << shape_str(trained[i].strides())
                                                               << ") is not one dense block of memory; DDP needs dense "
                                                                  "parameters (contiguous or channels-last)");
  }

  verify_same_model(*group_, *module_, first->second);
  TensorList everything = params.values();
  buffers_ = buffers.values();
  everything.insert(everything.end(), buffers_.begin(), buffers_.end());
  broadcast_from_rank0(*group_, everything);

  ReducerOptions ro;
  ro.first_bucket_bytes = options_.first_bucket_cap_bytes;
  ro.bucket_bytes = options_.bucket_cap_bytes;
  ro.find_unused_parameters = options_.find_unused_parameters;
  ro.gradient_as_bucket_view = options_.gradient_as_bucket_view;
  reducer_ = Reducer::create(std::move(trained), std::move(names), group_, ro);
}

bool DistributedDataParallel::pre_forward() {
  const bool sync = require_sync_ && GradMode::is_enabled();
  if (sync) reducer_->prepare_for_forward();
  if (options_.broadcast_buffers && is_training() && !buffers_.empty()) broadcast_from_rank0(*group_, buffers_);
  return sync;
}

void DistributedDataParallel::post_forward(bool sync, const TensorList& outputs) {
  if (sync) reducer_->prepare_for_backward(outputs);
}

Tensor DistributedDataParallel::forward(const Tensor& input) {
  auto* unary = dynamic_cast<nn::UnaryModule*>(module_.get());
  EMBER_CHECK(unary != nullptr, "DistributedDataParallel::forward: the wrapped " << module_->name()
                                                                                 << " is not a UnaryModule (one tensor "
                                                                                    "in, one out); call "
                                                                                    "ddp->forward_with([&] { return "
                                                                                    "module->forward(...); })");
  return forward_with([&] { return unary->forward(input); });
}

void DistributedDataParallel::register_comm_hook(CommHook hook) { reducer_->register_comm_hook(std::move(hook)); }

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_parameter_names() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& bucket : reducer_->bucket_indices()) {
    std::vector<std::string> names;
    for (size_t i : bucket) names.push_back(reducer_->parameter_names()[i]);
    out.push_back(std::move(names));
  }
  return out;
}

std::shared_ptr<nn::Module> DistributedDataParallel::clone() const {
  EMBER_FAIL(
      "DistributedDataParallel::clone: a DDP module cannot be cloned (its construction is a collective of "
      "the process group); clone the wrapped module with nn::clone(ddp->module()) and wrap the copy");
}

}  // namespace ember::parallel
