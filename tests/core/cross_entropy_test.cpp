// The fused cross_entropy_loss on the CPU: values and gradients against the
// same loss composed of log_softmax, gather and reductions, for every
// reduction, label smoothing, ignore_index, int32 and int64 targets, the
// float dtypes and odd sizes; finite-difference gradients in float64,
// second-order gradients (create_graph), rows that are all ignored, no rows,
// and the errors (a bad target, before anything is written; bad shapes).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "ember/ember.h"
#include "support/cuda_compare.h"
#include "support/error_message.h"
#include "support/gradcheck.h"

namespace ember {
namespace {

using testing::error_of;

using ::testing::HasSubstr;

// The loss from recorded ops, as nn::functional::cross_entropy composes it
// for inputs of more dims.
Tensor composed(const Tensor& x, const Tensor& target, int64_t ignore_index, double e, Reduction reduction) {
  Tensor logp = log_softmax(x, 1);
  Tensor ignored = eq(target, ignore_index);
  Tensor safe = where(ignored, Scalar(int64_t(0)), target);
  Tensor nll = where(ignored, 0.0, -gather(logp, 1, safe.unsqueeze(1)).squeeze(1));
  Tensor uniform = where(ignored, 0.0, -logp.sum({1}));
  Tensor loss = nll * (1.0 - e) + uniform * (e / double(x.size(1)));
  switch (reduction) {
    case Reduction::None: return loss;
    case Reduction::Sum: return loss.sum();
    case Reduction::Mean: return loss.sum() / logical_not(ignored).sum();
  }
  return {};
}

// Targets in [0, c) with every third row (from the second) ignore_index.
Tensor targets(int64_t n, int64_t c, int64_t ignore_index, DType dtype, uint64_t seed) {
  Generator g(seed);
  Tensor t = randint(0, c, {n}, DType::Int64, kCPU, &g);
  for (int64_t i = 1; i < n; i += 3) t[i].fill_(ignore_index);
  return t.to(dtype);
}

const Reduction kReductions[] = {Reduction::None, Reduction::Mean, Reduction::Sum};

TEST(CrossEntropyLoss, MatchesTheComposedLossAndItsGradient) {
  for (DType dt : {DType::Float64, DType::Float32}) {
    for (auto [n, c] : {std::pair<int64_t, int64_t>{1, 1}, {7, 10}, {33, 1025}, {5, 3}}) {
      for (DType tdt : {DType::Int64, DType::Int32}) {
        for (double e : {0.0, 0.1}) {
          for (Reduction r : kReductions) {
            Generator g(uint64_t(n * c));
            Tensor x = (randn({n, c}, DType::Float64, kCPU, &g) * 3.0).to(dt).set_requires_grad();
            Tensor t = targets(n, c, -100, tdt, uint64_t(n + c));
            Tensor fused = cross_entropy_loss(x, t, -100, e, r);
            Tensor reference = composed(x, t.to(DType::Int64), -100, e, r);
            const std::string what = std::string(dtype_name(dt)) + " n " + std::to_string(n) + " c " +
                                     std::to_string(c) + " " + dtype_name(tdt) + " smoothing " + std::to_string(e) +
                                     " reduction " + std::to_string(int(r));
            const testing::Tolerance tol =
                dt == DType::Float64 ? testing::Tolerance{1e-12, 1e-12} : testing::Tolerance{1e-5, 1e-5};
            EXPECT_TRUE(testing::tensors_close(fused, reference, tol)) << what;
            Tensor w = randn(fused.shape(), dt, kCPU, &g);
            Tensor gf = autograd::grad({(fused * w).sum()}, {x})[0];
            Tensor gr = autograd::grad({(reference * w).sum()}, {x})[0];
            EXPECT_TRUE(testing::tensors_close(gf, gr, tol)) << what << " (gradient)";
          }
        }
      }
    }
  }
}

TEST(CrossEntropyLoss, GradcheckForEveryReductionWithSmoothingAndIgnoredRows) {
  Tensor t = from_vector<int64_t>({2, -1, 0, 4, 1});
  for (Reduction r : kReductions) {
    for (double e : {0.0, 0.2}) {
      EXPECT_TRUE(testing::gradcheck([&](const TensorList& in) { return cross_entropy_loss(in[0], t, -1, e, r); },
                                     {testing::random_leaf({5, 6}, 11)}))
          << "reduction " << int(r) << " smoothing " << e;
    }
  }
  // A non-contiguous view of the logits.
  Tensor base = testing::random_leaf({6, 5}, 12);
  EXPECT_TRUE(testing::gradcheck(
      [&](const TensorList& in) { return cross_entropy_loss(in[0].t(), t, -1, 0.1, Reduction::Mean); }, {base}));
}

TEST(CrossEntropyLoss, SecondOrderGradientsThroughCreateGraph) {
  Tensor t = from_vector<int64_t>({1, 3, -100, 0});
  Generator g(5);
  Tensor w = randn({4, 4}, DType::Float64, kCPU, &g);
  for (bool transposed : {false, true}) {  // a non-contiguous view must stay connected too
    for (Reduction r : {Reduction::Mean, Reduction::Sum}) {
      EXPECT_TRUE(testing::gradcheck(
          [&](const TensorList& in) {
            Tensor logits = transposed ? in[0].t() : in[0];
            Tensor loss = cross_entropy_loss(logits, t, -100, 0.1, r);
            return autograd::grad({loss}, {in[0]}, {}, false, /*create_graph=*/true)[0] * w;
          },
          {testing::random_leaf({4, 4}, 13)}))
          << "reduction " << int(r) << (transposed ? ", transposed logits" : "");
    }
  }
  // Every row ignored: the mean's gradient is 0 under create_graph as without it.
  Tensor x = testing::random_leaf({3, 4}, 15);
  Tensor loss = cross_entropy_loss(x, full({3}, -100, DType::Int64), -100, 0.1, Reduction::Mean);
  Tensor grad = autograd::grad({loss}, {x}, {}, false, /*create_graph=*/true)[0];
  EXPECT_TRUE(testing::tensors_close(grad, zeros({3, 4}, DType::Float64), {0, 0}));
}

// 4M float32 rows of loss log(2): a float running sum would round each
// addend to the spacing of a total of millions; the kernel sums in double.
TEST(CrossEntropyLoss, ManyRowsSumWithoutRoundingAway) {
  const int64_t n = int64_t(1) << 22;
  Tensor x = zeros({n, 2}, DType::Float32);
  Tensor t = zeros({n}, DType::Int64);
  EXPECT_NEAR(cross_entropy_loss(x, t, -100, 0, Reduction::Mean).item<double>(), std::log(2.0), 1e-6);
  EXPECT_NEAR(cross_entropy_loss(x, t, -100, 0, Reduction::Sum).item<double>() / double(n), std::log(2.0), 1e-6);
}

TEST(CrossEntropyLoss, AllRowsIgnoredAndNoRows) {
  Tensor x = testing::random_leaf({3, 4}, 14);
  Tensor t = full({3}, -100, DType::Int64);
  EXPECT_TRUE(std::isnan(cross_entropy_loss(x, t, -100, 0.0, Reduction::Mean).item<double>()));
  Tensor sum = cross_entropy_loss(x, t, -100, 0.0, Reduction::Sum);
  EXPECT_EQ(sum.item<double>(), 0.0);
  sum.backward();
  EXPECT_TRUE(testing::tensors_close(x.grad(), zeros({3, 4}, DType::Float64), {0, 0}));

  Tensor empty_x = zeros({0, 4}, DType::Float64).set_requires_grad();
  Tensor empty_t = zeros({0}, DType::Int64);
  EXPECT_EQ(cross_entropy_loss(empty_x, empty_t, -100, 0.0, Reduction::None).numel(), 0);
  EXPECT_EQ(cross_entropy_loss(empty_x, empty_t, -100, 0.0, Reduction::Sum).item<double>(), 0.0);
  Tensor mean = cross_entropy_loss(empty_x, empty_t, -100, 0.0, Reduction::Mean);
  EXPECT_TRUE(std::isnan(mean.item<double>()));
  mean.backward();
  EXPECT_EQ(empty_x.grad().numel(), 0);
}

TEST(CrossEntropyLoss, ErrorsNameTheTargetAndTheShapes) {
  Tensor x = zeros({3, 5});
  std::string e = error_of([&] { cross_entropy_loss(x, from_vector<int64_t>({0, 7, -3}), -100, 0, Reduction::Mean); });
  EXPECT_THAT(e, HasSubstr("cross_entropy: a target is not a class index for 5 classes (valid targets: 0 to 4, or "
                           "ignore_index = -100)"));
  EXPECT_THAT(e, HasSubstr("index 7 is out of bounds for dim 1 with size 5"));
  EXPECT_THAT(error_of([&] { cross_entropy_loss(x, zeros({4}, DType::Int64), -100, 0, Reduction::Mean); }),
              HasSubstr("logits of shape [3, 5] take a target of shape [3], got [4]"));
  EXPECT_THAT(error_of([&] { cross_entropy_loss(zeros({3}), zeros({3}, DType::Int64), -100, 0, Reduction::Mean); }),
              HasSubstr("expected floating logits of shape (N, C), got [3] float32"));
  EXPECT_THAT(error_of([&] { cross_entropy_loss(x, zeros({3}), -100, 0, Reduction::Mean); }),
              HasSubstr("expected class indices as an int64 or int32 tensor, got a target of [3] float32"));
  EXPECT_THAT(error_of([&] { cross_entropy_loss(x, zeros({3}, DType::Int64), -100, 2.0, Reduction::Mean); }),
              HasSubstr("label_smoothing must be in [0, 1], got 2"));
}

TEST(CrossEntropyLoss, HalfTypesComputeInFloat) {
  Generator g(21);
  Tensor x = randn({9, 13}, DType::Float32, kCPU, &g);
  Tensor t = targets(9, 13, -100, DType::Int64, 22);
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    Tensor xh = x.to(dt);
    Tensor fused = cross_entropy_loss(xh, t, -100, 0.1, Reduction::None);
    EXPECT_EQ(fused.dtype(), dt);
    EXPECT_TRUE(testing::tensors_close(fused.to(DType::Float32),
                                       composed(xh.to(DType::Float32), t, -100, 0.1, Reduction::None),
                                       testing::tolerance_for(dt)));
  }
}

}  // namespace
}  // namespace ember
