// Losses: cross_entropy of (N, C) logits (and of unbatched (C) ones) is the
// fused op cross_entropy_loss (ember/core/ops.h); of (N, C, d...) logits it is
// log_softmax + nll_loss; nll_loss reads the target log-probabilities with
// gather. Either way the index checks on CPU and CUDA turn a bad label into
// an ember::Error. The rest are short compositions of elementwise ops and
// reductions, so their backward comes from those ops.
#include "ember/nn/loss.h"

#include <string>

#include "ember/core/autocast_state.h"
#include "ember/core/ops.h"
#include "ember/core/ops/index_kernels.h"
#include "ember/core/ops/op_utils.h"

namespace ember::nn {
namespace functional {
namespace {

using ember::detail::describe;

Tensor reduce(const Tensor& loss, Reduction reduction) {
  switch (reduction) {
    case Reduction::None: return loss;
    case Reduction::Sum: return loss.sum();
    case Reduction::Mean: return loss.mean();
  }
  EMBER_FAIL("loss: unknown reduction " << int(reduction));
}

// The per-target negative log-likelihood of log-probabilities logp
// (N, C, d...) at target (N, d...), 0 where the target is ignore_index,
// and the bool mask of the ignored targets.
struct Picked {
  Tensor loss;
  Tensor ignored;
};

Picked pick_targets(const char* op, const Tensor& logp, const Tensor& target, int64_t ignore_index) {
  const int64_t classes = logp.size(1);
  Tensor ignored = eq(target, ignore_index);
  Tensor safe = where(ignored, Scalar(int64_t(0)), target);
  // A bad target fails in the gather, at once on the CPU and later on a GPU
  // (ember/core/ops/index_kernels.h); either way its message starts with this.
  IndexErrorContext context(std::string(op) + ": a target is not a class index for " + std::to_string(classes) +
                            " classes (valid targets: 0 to " + std::to_string(classes - 1) +
                            ", or ignore_index = " + std::to_string(ignore_index) + "); ");
  Tensor picked = gather(logp, 1, safe.unsqueeze(1)).squeeze(1);
  return {where(ignored, 0.0, -picked), ignored};
}

// Checks input (N, C, d...) or (C) against target (N, d...) or (); returns
// both with a batch dim.
std::pair<Tensor, Tensor> batched(const char* op, const Tensor& input, const Tensor& target) {
  EMBER_CHECK(input.defined() && target.defined(), op << ": the input and the target must be defined");
  EMBER_CHECK(is_floating(input.dtype()), op << ": expected a floating input, got " << describe(input));
  EMBER_CHECK(is_integral(target.dtype()), op << ": expected class indices as an int64 tensor, got a target of "
                                              << describe(target)
                                              << " (probability targets are not supported; convert indices with "
                                                 ".to(DType::Int64))");
  EMBER_CHECK(target.device() == input.device(), op << ": the input is " << describe(input) << " but the target is "
                                                    << describe(target) << "; move one with .to(device)");
  EMBER_CHECK(input.dim() >= 1, op << ": expected an input of shape (N, C, ...) or (C), got a 0-dim tensor");
  if (input.dim() == 1) {
    EMBER_CHECK(target.dim() == 0, op << ": an unbatched input of shape " << shape_str(input.shape())
                                      << " takes a 0-dim target, got shape " << shape_str(target.shape()));
    return {input.unsqueeze(0), target.unsqueeze(0)};
  }
  Shape expected = input.shape();
  expected.erase(expected.begin() + 1);
  EMBER_CHECK(target.shape() == expected, op << ": the target must have the input's shape without the class dim 1, "
                                                "i.e. "
                                             << shape_str(expected) << " for an input of shape "
                                             << shape_str(input.shape()) << ", but got " << shape_str(target.shape()));
  return {input, target};
}

Tensor reduce_targets(const Tensor& loss, const Tensor& ignored, Reduction reduction, bool unbatched) {
  switch (reduction) {
    case Reduction::None: return unbatched ? loss.squeeze(0) : loss;
    case Reduction::Sum: return loss.sum();
    case Reduction::Mean: return loss.sum() / logical_not(ignored).sum();
  }
  EMBER_FAIL("loss: unknown reduction " << int(reduction));
}

void check_same_shape(const char* op, const Tensor& input, const Tensor& target) {
  EMBER_CHECK(input.defined() && target.defined(), op << ": the input and the target must be defined");
  EMBER_CHECK(input.shape() == target.shape(), op << ": the input has shape " << shape_str(input.shape())
                                                  << " but the target " << shape_str(target.shape())
                                                  << "; reshape the target to the input's shape");
  EMBER_CHECK(is_floating(input.dtype()), op << ": expected a floating input, got " << describe(input));
}

}  // namespace

Tensor nll_loss(const Tensor& input, const Tensor& target, const NLLLossOptions& options) {
  if (autocast_state::any_enabled()) [[unlikely]] {  // losses run in float32 under autocast
    Tensor c0 = input, c1 = target;
    if (autocast_state::float32_inputs({&c0, &c1})) return nll_loss(c0, c1, options);
  }
  auto [in, tg] = batched("nll_loss", input, target);
  Picked p = pick_targets("nll_loss", in, tg, options.ignore_index);
  return reduce_targets(p.loss, p.ignored, options.reduction, input.dim() == 1);
}

Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyOptions& options) {
  const double e = options.label_smoothing;
  EMBER_CHECK(e >= 0.0 && e <= 1.0, "cross_entropy: label_smoothing must be in [0, 1], got " << e);
  auto [in, tg] = batched("cross_entropy", input, target);
  if (in.dim() == 2 && (tg.dtype() == DType::Int64 || tg.dtype() == DType::Int32)) {
    // The fused loss runs in float32 under autocast itself.
    Tensor loss = cross_entropy_loss(in, tg, options.ignore_index, e, options.reduction);
    return input.dim() == 1 && options.reduction == Reduction::None ? loss.squeeze(0) : loss;
  }
  if (autocast_state::any_enabled()) [[unlikely]] {  // losses run in float32 under autocast
    Tensor c0 = input, c1 = target;
    if (autocast_state::float32_inputs({&c0, &c1})) return cross_entropy(c0, c1, options);
  }
  Tensor logp = log_softmax(in, 1);
  Picked p = pick_targets("cross_entropy", logp, tg, options.ignore_index);
  Tensor loss = p.loss;
  if (e > 0.0) {
    Tensor uniform = where(p.ignored, 0.0, -logp.sum({1}));
    loss = loss * (1.0 - e) + uniform * (e / double(in.size(1)));
  }
  return reduce_targets(loss, p.ignored, options.reduction, input.dim() == 1);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  if (autocast_state::any_enabled()) [[unlikely]] {  // losses run in float32 under autocast
    Tensor c0 = input, c1 = target;
    if (autocast_state::float32_inputs({&c0, &c1})) return mse_loss(c0, c1, reduction);
  }
  check_same_shape("mse_loss", input, target);
  return reduce(square(input - target), reduction);
}

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  if (autocast_state::any_enabled()) [[unlikely]] {  // losses run in float32 under autocast
    Tensor c0 = input, c1 = target;
    if (autocast_state::float32_inputs({&c0, &c1})) return l1_loss(c0, c1, reduction);
  }
  check_same_shape("l1_loss", input, target);
  return reduce(abs(input - target), reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight,
                                        Reduction reduction, const Tensor& pos_weight) {
  if (autocast_state::any_enabled()) [[unlikely]] {  // losses run in float32 under autocast
    Tensor c0 = input, c1 = target, c2 = weight, c3 = pos_weight;
    if (autocast_state::float32_inputs({&c0, &c1, &c2, &c3})) {
      return binary_cross_entropy_with_logits(c0, c1, c2, reduction, c3);
    }
  }
  check_same_shape("binary_cross_entropy_with_logits", input, target);
  // softplus(-x) = log(1 + exp(-x)) = log(1 + exp(-|x|)) + max(-x, 0), with
  // no overflow for any x.
  Tensor softplus_neg = log(exp(-abs(input)) + 1.0) + relu(-input);
  Tensor loss;
  if (pos_weight.defined()) {
    EMBER_CHECK(pos_weight.device() == input.device(), "binary_cross_entropy_with_logits: pos_weight is "
                                                           << describe(pos_weight) << " but the input is "
                                                           << describe(input) << "; move it with .to(device)");
    Tensor log_weight = (pos_weight - 1.0) * target + 1.0;
    loss = (1.0 - target) * input + log_weight * softplus_neg;
  } else {
    loss = (1.0 - target) * input + softplus_neg;
  }
  if (weight.defined()) {
    EMBER_CHECK(weight.device() == input.device(), "binary_cross_entropy_with_logits: weight is "
                                                       << describe(weight) << " but the input is " << describe(input)
                                                       << "; move it with .to(device)");
    loss = loss * weight;
  }
  return reduce(loss, reduction);
}

}  // namespace functional

Tensor CrossEntropyLoss::forward(const Tensor& input, const Tensor& target) {
  return functional::cross_entropy(input, target, options);
}
std::shared_ptr<Module> CrossEntropyLoss::clone() const { return clone_as<CrossEntropyLoss>(options); }

Tensor NLLLoss::forward(const Tensor& input, const Tensor& target) {
  return functional::nll_loss(input, target, options);
}
std::shared_ptr<Module> NLLLoss::clone() const { return clone_as<NLLLoss>(options); }

Tensor MSELoss::forward(const Tensor& input, const Tensor& target) {
  return functional::mse_loss(input, target, reduction);
}
std::shared_ptr<Module> MSELoss::clone() const { return clone_as<MSELoss>(reduction); }

Tensor L1Loss::forward(const Tensor& input, const Tensor& target) {
  return functional::l1_loss(input, target, reduction);
}
std::shared_ptr<Module> L1Loss::clone() const { return clone_as<L1Loss>(reduction); }

BCEWithLogitsLoss::BCEWithLogitsLoss(Tensor weight, Reduction reduction, Tensor pos_weight) : reduction(reduction) {
  if (weight.defined()) this->weight = register_buffer("weight", std::move(weight));
  if (pos_weight.defined()) this->pos_weight = register_buffer("pos_weight", std::move(pos_weight));
}

Tensor BCEWithLogitsLoss::forward(const Tensor& input, const Tensor& target) {
  return functional::binary_cross_entropy_with_logits(input, target, weight, reduction, pos_weight);
}

std::shared_ptr<Module> BCEWithLogitsLoss::clone() const {
  // Fresh buffers (filled by clone_as), never the original's tensors.
  auto fresh = [](const Tensor& t) { return t.defined() ? empty_like(t) : Tensor(); };
  return clone_as<BCEWithLogitsLoss>(fresh(weight), reduction, fresh(pos_weight));
}

}  // namespace ember::nn
