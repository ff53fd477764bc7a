// The Reducer (ember/parallel/distributed/ddp/reducer.h): bucket assignment, the per-parameter
// hooks, launching buckets in order, and the end-of-backward callback.
//
// Per synchronized backward the state moves: prepare_for_backward arms it
// (every bucket's pending count full, nothing ready); each parameter's hook
// fills its slot and counts its bucket down; a bucket that reaches zero, and
// every complete bucket after it, is launched as soon as all buckets before
// it were; the first hook queues finalize, which runs when the engine's walk
// is over and turns the buckets' results into grad().
#include "ember/parallel/distributed/ddp/reducer.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "ember/core/autograd/accumulate_grad.h"
#include "ember/core/autograd/engine.h"
#include "ember/core/grad_mode.h"
#include "ember/core/ops.h"
#include "ember/core/ops/op_utils.h"

namespace ember::parallel {

using ember::detail::describe;

namespace {

// Whether a and b are the same elements of the same storage.
bool is_alias(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.storage() == b.storage() && a.storage_offset() == b.storage_offset() &&
         a.shape() == b.shape() && a.strides() == b.strides() && a.dtype() == b.dtype();
}

// "a, b, c" with at most `limit` names, then how many more.
std::string name_list(const std::vector<std::string>& names, size_t limit = 20) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < limit; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > limit) out += " and " + std::to_string(names.size() - limit) + " more";
  return out;
}

}  // namespace

std::vector<std::vector<size_t>> compute_buckets(const TensorList& params, const std::vector<size_t>& order,
                                                 int64_t first_bucket_bytes, int64_t bucket_bytes) {
  EMBER_CHECK(first_bucket_bytes > 0 && bucket_bytes > 0, "DistributedDataParallel: bucket caps must be positive, got "
                                                              << first_bucket_bytes << " and " << bucket_bytes
                                                              << " bytes");
  struct Open {
    std::vector<size_t> params;
    int64_t bytes = 0;
    bool first = true;  // no bucket of this key was closed yet
  };
  // Keyed by dtype and device, in the order the keys first appear.
  std::vector<std::pair<std::pair<DType, std::string>, Open>> open;
  std::vector<std::vector<size_t>> buckets;
  for (size_t i : order) {
    EMBER_CHECK(i < params.size(),
                "DistributedDataParallel: bucket order names parameter " << i << " of " << params.size());
    const Tensor& p = params[i];
    auto key = std::make_pair(p.dtype(), p.device().str());
    auto it = std::find_if(open.begin(), open.end(), [&](const auto& o) { return o.first == key; });
    if (it == open.end()) {
      open.push_back({key, Open{}});
      it = open.end() - 1;
    }
    Open& o = it->second;
    o.params.push_back(i);
    o.bytes += p.numel() * int64_t(p.element_size());
    if (o.bytes >= (o.first ? first_bucket_bytes : bucket_bytes)) {
      buckets.push_back(std::move(o.params));
      o.params.clear();
      o.bytes = 0;
      o.first = false;
    }
  }
  for (auto& [key, o] : open) {
    if (!o.params.empty()) buckets.push_back(std::move(o.params));
  }
  std::vector<size_t> position(params.size(), 0);
  for (size_t k = 0; k < order.size(); ++k) position[order[k]] = k;
  std::stable_sort(buckets.begin(), buckets.end(),
                   [&](const auto& a, const auto& b) { return position[a.front()] < position[b.front()]; });
  return buckets;
}

std::shared_ptr<Reducer> Reducer::create(TensorList params, std::vector<std::string> names,
                                         std::shared_ptr<ProcessGroup> group, ReducerOptions options) {
  std::shared_ptr<Reducer> reducer(new Reducer(std::move(params), std::move(names), std::move(group), options));
  std::weak_ptr<Reducer> weak = reducer;
  for (size_t i = 0; i < reducer->params_.size(); ++i) {
    Tensor p = reducer->params_[i];
    p.register_post_accumulate_grad_hook([weak, i](const Tensor&) {
      if (std::shared_ptr<Reducer> r = weak.lock()) r->on_gradient(i);
    });
  }
  return reducer;
}

Reducer::Reducer(TensorList params, std::vector<std::string> names, std::shared_ptr<ProcessGroup> group,
                 ReducerOptions options)
    : params_(std::move(params)), names_(std::move(names)), group_(std::move(group)), options_(options) {
  EMBER_CHECK(group_ != nullptr, "Reducer: the process group is null");
  EMBER_CHECK(!params_.empty(), "Reducer: there are no parameters that require grad to synchronize");
  EMBER_CHECK(names_.size() == params_.size(),
              "Reducer: got " << names_.size() << " names for " << params_.size() << " parameters");
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    EMBER_CHECK(p.defined() && p.is_leaf() && p.requires_grad(),
                "Reducer: parameter '" << names_[i] << "' must be a leaf that requires grad");
    EMBER_CHECK(p.is_non_overlapping_and_dense(),
                "DistributedDataParallel: parameter '"
                    << names_[i] << "' (" << describe(p) << ", strides " << shape_str(p.strides())
                    << ") is not one dense block of memory; gradients are views of flat buckets laid out as their "
                       "parameters, so parameters must be dense (contiguous or channels-last)");
    EMBER_CHECK(p.device() == params_[0].device(), "DistributedDataParallel: parameter '"
                                                       << names_[i] << "' is on " << p.device() << " but '" << names_[0]
                                                       << "' is on " << params_[0].device()
                                                       << "; a module wrapped by DDP must have all its parameters on "
                                                          "one device (move it with module->to(device) first)");
  }
  ready_.assign(params_.size(), false);
  used_.assign(params_.size(), 0);
  kept_grads_.resize(params_.size());
  std::vector<size_t> reverse(params_.size());
  for (size_t i = 0; i < reverse.size(); ++i) reverse[i] = reverse.size() - 1 - i;
  build_buckets(reverse);
}

Reducer::~Reducer() = default;

void Reducer::build_buckets(const std::vector<size_t>& order) {
  std::vector<std::vector<size_t>> assignment =
      compute_buckets(params_, order, options_.first_bucket_bytes, options_.bucket_bytes);
  std::vector<Bucket> buckets;
  slots_.assign(params_.size(), Slot{});
  NoGradGuard no_grad;
  for (size_t b = 0; b < assignment.size(); ++b) {
    Bucket bucket;
    bucket.params = assignment[b];
    int64_t total = 0;
    for (size_t i : bucket.params) {
      bucket.offsets.push_back(total);
      total += params_[i].numel();
    }
    const Tensor& first = params_[bucket.params.front()];
    bucket.buffer = zeros({total}, first.dtype(), first.device());
    for (size_t k = 0; k < bucket.params.size(); ++k) {
      Tensor p = params_[bucket.params[k]];
      // Laid out as the parameter (channels-last weights too), so the
      // gradient the engine accumulates is the view itself.
      Tensor view = bucket.buffer.as_strided(p.shape(), p.strides(), bucket.offsets[k]);
      bucket.views.push_back(view);
      slots_[bucket.params[k]] = Slot{b, k};
      // Gradients already there (a rebuild, or grads made before wrapping)
      // move into the bucket.
      Tensor g = p.grad();
      if (options_.gradient_as_bucket_view && g.defined()) {
        view.copy_(g);
        p.set_grad(view);
      }
    }
    bucket.pending = bucket.params.size();
    buckets.push_back(std::move(bucket));
  }
  buckets_ = std::move(buckets);
}

std::vector<std::vector<size_t>> Reducer::bucket_indices() const {
  std::vector<std::vector<size_t>> out;
  for (const Bucket& b : buckets_) out.push_back(b.params);
  return out;
}

std::vector<std::string> Reducer::names_of(const std::vector<size_t>& indices) const {
  std::vector<std::string> out;
  for (size_t i : indices) out.push_back(names_[i]);
  return out;
}

void Reducer::check_usable(const char* when) const {
  EMBER_CHECK(broken_.empty(), "DistributedDataParallel: " << when << " on rank " << group_->rank()
                                                           << ": unusable since an earlier error in its gradient "
                                                              "reduction: "
                                                           << broken_);
}

void Reducer::register_comm_hook(CommHook hook) {
  EMBER_CHECK(hook != nullptr, "DistributedDataParallel::register_comm_hook: the hook is empty");
  EMBER_CHECK(!hook_,
              "DistributedDataParallel::register_comm_hook: a communication hook is registered already; "
              "register one hook only");
  EMBER_CHECK(!synchronized_once_ && !started_,
              "DistributedDataParallel::register_comm_hook: register the hook before the first backward");
  hook_ = std::move(hook);
}

void Reducer::prepare_for_forward() {
  check_usable("forward");
  if (started_) {
    broken_ =
        "a synchronized backward stopped (an exception in its graph walk) after it had started reducing "
        "gradients, so the ranks' collectives no longer match";
    check_usable("forward");
  }
  if (rebuilt_ || !synchronized_once_ || options_.find_unused_parameters) return;
  // Rank 0's arrival order, for every rank.
  std::vector<int64_t> order(arrival_.begin(), arrival_.end());
  EMBER_CHECK(order.size() == params_.size(), "Reducer: recorded " << order.size() << " arrivals for " << params_.size()
                                                                   << " parameters (an ember bug)");
  Tensor t = from_vector<int64_t>(order).to(params_[0].device());
  try {
    group_->broadcast(t, 0)->wait();
  } catch (const std::exception& e) {
    broken_ = e.what();
    throw;
  }
  std::vector<int64_t> got = to_vector<int64_t>(t.cpu());
  std::vector<bool> seen(params_.size(), false);
  std::vector<size_t> rank0_order;
  for (int64_t i : got) {
    EMBER_CHECK(i >= 0 && size_t(i) < params_.size() && !seen[size_t(i)],
                "DistributedDataParallel: rank 0's gradient order is not a permutation of the "
                    << params_.size() << " parameters (an ember bug)");
    seen[size_t(i)] = true;
    rank0_order.push_back(size_t(i));
  }
  build_buckets(rank0_order);
  rebuilt_ = true;
  arrival_.clear();
}

void Reducer::prepare_for_backward(const TensorList& outputs) {
  check_usable("forward");
  expect_hooks_ = true;
  started_ = false;
  marked_unused_ = false;
  next_bucket_ = 0;
  std::fill(ready_.begin(), ready_.end(), false);
  for (Tensor& k : kept_grads_) k = Tensor();
  for (Bucket& b : buckets_) {
    b.pending = b.params.size();
    b.future.reset();
  }
  unused_.clear();
  if (!options_.find_unused_parameters) return;
  // Which parameters' AccumulateGrad nodes the outputs' graph reaches.
  std::unordered_map<const TensorImpl*, size_t> index_of;
  for (size_t i = 0; i < params_.size(); ++i) index_of[params_[i].impl()] = i;
  std::vector<bool> reached(params_.size(), false);
  std::vector<Node*> stack;
  std::unordered_set<Node*> seen;
  std::vector<std::shared_ptr<Node>> roots;  // alive during the walk
  for (const Tensor& out : outputs) {
    if (!out.defined()) continue;
    Edge e = autograd::gradient_edge(out);
    if (!e.valid()) continue;
    roots.push_back(e.node);
    if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (auto* acc = dynamic_cast<autograd::AccumulateGrad*>(n)) {
      Tensor leaf = acc->leaf();
      if (leaf.defined()) {
        auto it = index_of.find(leaf.impl());
        if (it != index_of.end()) reached[it->second] = true;
      }
    }
    for (const Edge& e : n->next_edges()) {
      if (e.valid() && seen.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!reached[i]) unused_.push_back(i);
  }
}

void Reducer::on_gradient(size_t index) {
  used_[index] = 1;
  if (!expect_hooks_) return;  // no_sync, or a second backward: local accumulation
  try {
    if (!started_) {
      started_ = true;
      std::shared_ptr<Reducer> self = shared_from_this();
      autograd::queue_callback([self] { self->finalize(); });
    }
    if (options_.find_unused_parameters && !marked_unused_) {
      marked_unused_ = true;
      for (size_t u : unused_) mark_ready(u, /*locally_used=*/false);
    }
    EMBER_CHECK(!ready_[index], "DistributedDataParallel: rank "
                                    << group_->rank() << ": parameter '" << names_[index]
                                    << "' got a gradient after DDP had marked it unused: the graph of "
                                       "the forward's outputs does not reach it, but the loss uses it "
                                       "by another path. Compute the loss from the outputs of the DDP "
                                       "module's forward only");
    mark_ready(index, /*locally_used=*/true);
  } catch (const std::exception& e) {
    if (broken_.empty()) broken_ = e.what();
    throw;
  }
}

void Reducer::mark_ready(size_t index, bool locally_used) {
  ready_[index] = true;
  if (!synchronized_once_ && !options_.find_unused_parameters) arrival_.push_back(index);
  const Slot s = slots_[index];
  Bucket& bucket = buckets_[s.bucket];
  Tensor view = bucket.views[s.index];
  Tensor param = params_[index];
  Tensor grad = param.grad();
  {
    NoGradGuard no_grad;
    if (grad.defined()) {
      const bool alias = is_alias(grad, view);
      // A locally unused parameter's grad() stays as it is unless another
      // rank used it (finalize decides); keep what the reduction overwrites.
      if (!locally_used && alias) kept_grads_[index] = grad.detach().clone();
      if (!alias) {
        view.copy_(grad);
        if (options_.gradient_as_bucket_view && locally_used) param.set_grad(view);
      }
    } else {
      view.zero_();
    }
  }
  if (--bucket.pending == 0) launch_ready_buckets();
}

void Reducer::launch_ready_buckets() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    Bucket& b = buckets_[next_bucket_];
    TensorList params;
    for (size_t i : b.params) params.push_back(params_[i]);
    GradBucket view(next_bucket_, buckets_.size(), b.buffer, std::move(params), b.offsets, b.views);
    b.future.emplace(hook_ ? hook_(*group_, view) : allreduce_hook(*group_, view));
    ++next_bucket_;
  }
}

void Reducer::finalize() {
  try {
    finalize_unchecked();
  } catch (const std::exception& e) {
    if (broken_.empty()) broken_ = e.what();
    expect_hooks_ = false;
    started_ = false;
    throw;
  }
}

void Reducer::finalize_unchecked() {
  const bool find_unused = options_.find_unused_parameters;
  if (find_unused) {
    // Reached by the walk, yet no gradient came (say, an output the loss ignores).
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!ready_[i]) mark_ready(i, /*locally_used=*/false);
    }
  } else if (next_bucket_ < buckets_.size()) {
    std::vector<size_t> missing;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!ready_[i]) missing.push_back(i);
    }
    EMBER_FAIL("DistributedDataParallel: rank "
               << group_->rank() << ": " << missing.size() << " of " << params_.size()
               << " parameters got no gradient in this backward: " << name_list(names_of(missing))
               << ". Their gradients are all-reduced in buckets, so every parameter must take part in computing "
                  "the loss on every rank. If some parameters go unused in some iterations (a branch not taken, "
                  "an output left out of the loss), construct DistributedDataParallel with "
                  "find_unused_parameters = true; freeze a layer for good with requires_grad = false before "
                  "wrapping. The other ranks wait for this rank's buckets and fail after the process group's "
                  "timeout");
  }
  Tensor usage;
  std::shared_ptr<Work> usage_work;
  if (find_unused) {
    usage = from_vector<int32_t>(used_).to(params_[0].device());
    usage_work = group_->all_reduce(usage, ReduceOp::Sum);
  }
  NoGradGuard no_grad;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    Tensor result = bucket.future->wait();
    bucket.future.reset();
    EMBER_CHECK(result.defined() && result.numel() == bucket.buffer.numel(),
                "DistributedDataParallel: the communication hook returned "
                    << (result.defined() ? describe(result) : std::string("an undefined tensor")) << " for bucket " << b
                    << ", whose buffer is " << describe(bucket.buffer)
                    << "; a hook's BucketFuture must give the bucket's reduced gradients, flat");
    if (!is_alias(result, bucket.buffer)) bucket.buffer.copy_(result.reshape({result.numel()}));
  }
  std::vector<int32_t> global_use;
  if (find_unused) {
    usage_work->wait();
    global_use = to_vector<int32_t>(usage.cpu());
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    const Slot s = slots_[i];
    const Tensor& view = buckets_[s.bucket].views[s.index];
    Tensor param = params_[i];
    Tensor grad = param.grad();
    if (find_unused && global_use[i] == 0) {
      // No rank used it: grad() as before the backward.
      if (kept_grads_[i].defined()) grad.copy_(kept_grads_[i]);
      continue;
    }
    if (options_.gradient_as_bucket_view) {
      if (!is_alias(grad, view)) param.set_grad(view);
    } else if (grad.defined()) {
      grad.copy_(view);
    } else {
      param.set_grad(view.clone());
    }
  }
  expect_hooks_ = false;
  started_ = false;
  std::fill(used_.begin(), used_.end(), 0);
  for (Tensor& k : kept_grads_) k = Tensor();
  synchronized_once_ = true;
}

}  // namespace ember::parallel
