// Front-end of multinomial, composed of ops with kernels on every device:
// cumsum and searchsorted with replacement, topk without.
//
// Contract (torch.multinomial's):
// - probs is floating, 1-D (one distribution) or 2-D (a distribution per
//   row) of non-negative, finite weights; a row need not sum to 1. The
//   result is int64, (num_samples) or (rows, num_samples), with no history.
// - Errors: a non-floating or non-1-D/2-D probs, num_samples <= 0, and
//   without replacement num_samples > the number of categories; then, read
//   on the host (one wait for the device), an entry that is negative, inf or
//   NaN, a row that sums to 0, and without replacement a row with fewer
//   non-zero weights than num_samples.
// - With replacement: the inverse CDF. Each draw takes u ~ U[0, 1) and
//   picks the first category whose running sum (float64) reaches
//   (1 - u) * the row's sum, which lies in (0, sum]: a zero-weight category
//   is never picked.
// - Without replacement: the exponential race PyTorch uses. Each category
//   gets the key weight / q with q ~ Exponential(1) (q = -log(1 - u), kept
//   above 0); the num_samples largest keys win, in decreasing key order
//   (topk). Zero weights get key -1 and never win.
// - Randomness comes from the generator (the device's default if null) in
//   float64; rand gives the same values on every device for one seed, so
//   CPU and CUDA draw the same indices for the same seed and input, up to
//   draws that land within rounding of a category boundary.
#include <cfloat>
#include <limits>
#include <vector>

#include "ember/core/ops.h"
#include "ember/core/ops/op_utils.h"

namespace ember {

using detail::describe;

namespace {

// Checks probs' values (rows, C) in float64, reading three counts back in
// one transfer.
void check_weights(const Tensor& p, const Tensor& probs, int64_t num_samples, bool replacement) {
  const double inf = std::numeric_limits<double>::infinity();
  Tensor bad = sum(logical_or(logical_or(lt(p, 0.0), ne(p, p)), eq(p, inf)));
  Tensor zero_rows = sum(eq(sum(p, {1}), 0.0));
  Tensor fewest_nonzero = amin(sum(gt(p, 0.0), {1}));
  std::vector<int64_t> counts = to_vector<int64_t>(stack({bad, zero_rows, fewest_nonzero.to(DType::Int64)}));
  EMBER_CHECK(counts[0] == 0, "multinomial: the probability tensor "
                                  << describe(probs) << " contains inf, NaN or a negative entry (" << counts[0]
                                  << " of them); weights must be finite and non-negative");
  EMBER_CHECK(counts[1] == 0, "multinomial: invalid distribution: " << counts[1] << " row(s) of " << describe(probs)
                                                                    << " sum to 0; each row needs a positive weight");
  EMBER_CHECK(replacement || counts[2] >= num_samples,
              "multinomial: cannot draw " << num_samples << " samples without replacement from " << describe(probs)
                                          << ": a row has only " << counts[2]
                                          << " non-zero categories; draw fewer samples or pass replacement = true");
}

}  // namespace

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement, Generator* generator) {
  EMBER_CHECK(probs.defined(), "multinomial: got an undefined tensor");
  EMBER_CHECK(is_floating(probs.dtype()), "multinomial: expected floating-point probabilities, got "
                                              << describe(probs) << "; convert with .to(DType::Float32)");
  EMBER_CHECK(probs.dim() == 1 || probs.dim() == 2,
              "multinomial: probs must be 1-D or 2-D (one distribution per row), got " << describe(probs));
  EMBER_CHECK(num_samples > 0, "multinomial: num_samples must be positive, got " << num_samples);
  const int64_t categories = probs.size(-1);
  EMBER_CHECK(replacement || num_samples <= categories,
              "multinomial: cannot draw " << num_samples << " samples without replacement from " << categories
                                          << " categories (probs " << describe(probs) << "); draw at most "
                                          << categories << " or pass replacement = true");
  const int64_t rows = probs.dim() == 2 ? probs.size(0) : 1;
  const Device device = probs.device();
  Tensor out;
  if (rows == 0) {
    out = empty({0, num_samples}, DType::Int64, device);
  } else {
    NoGradGuard no_grad;
    Tensor p = (probs.dim() == 1 ? probs.unsqueeze(0) : probs).to(DType::Float64);
    check_weights(p, probs, num_samples, replacement);
    if (replacement) {
      Tensor cdf = cumsum(p, 1);
      Tensor target =
          rsub(rand({rows, num_samples}, DType::Float64, device, generator), 1.0) * cdf.narrow(1, categories - 1, 1);
      out = searchsorted(cdf, target);
    } else {
      Tensor u = rand({rows, categories}, DType::Float64, device, generator);
      Tensor q = clamp(neg(log(rsub(u, 1.0))), DBL_MIN);
      Tensor keys = where(gt(p, 0.0), p / q, -1.0);
      out = topk(keys, num_samples, 1).second;
    }
  }
  return probs.dim() == 1 ? out.reshape({num_samples}) : out;
}

Tensor Tensor::multinomial(int64_t num_samples, bool replacement, Generator* generator) const {
  return ember::multinomial(*this, num_samples, replacement, generator);
}

}  // namespace ember
