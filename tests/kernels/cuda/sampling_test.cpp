// CUDA multinomial: the same seed draws the same indices as on the CPU
// (with and without replacement, 1-D and 2-D, a GPT-sized row), frequencies
// of many draws against the normalized weights, the error checks.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "support/cuda_compare.h"
#include "support/error_message.h"

namespace ember {
namespace {

TEST(CudaMultinomial, SameSeedSameDrawsAsCpu) {
  EMBER_REQUIRE_CUDA();
  Generator g(1);
  Tensor probs = rand({5, 1001}, DType::Float32, kCPU, &g);
  Tensor vocab = softmax(randn({2, 50257}, DType::Float32, kCPU, &g), 1);
  for (bool replacement : {true, false}) {
    for (const Tensor& p : {probs, probs.select(0, 2), vocab}) {
      Generator cpu_gen(99), cuda_gen(99);
      Tensor on_cpu = multinomial(p, 40, replacement, &cpu_gen);
      Tensor on_cuda = multinomial(p.to(cuda_device()), 40, replacement, &cuda_gen);
      EXPECT_EQ(on_cuda.device(), cuda_device());
      EXPECT_TRUE(testing::tensors_close(on_cuda, on_cpu)) << "replacement " << replacement;
    }
  }
}

TEST(CudaMultinomial, FrequenciesAndZeroWeights) {
  EMBER_REQUIRE_CUDA();
  const std::vector<double> weights = {0.2, 0, 0.6, 1.2, 0, 0.05};
  const double total = 2.05;
  Generator g(5);
  Tensor probs = from_vector(weights).to(cuda_device());
  for (bool replacement : {true, false}) {
    // Without replacement, the first draw of each of many rows.
    Tensor draws = replacement ? multinomial(probs, 40000, true, &g)
                               : multinomial(probs.unsqueeze(0).expand({40000, 6}), 3, false, &g).select(1, 0);
    std::vector<int64_t> d = to_vector<int64_t>(draws);
    std::vector<double> count(6, 0);
    for (int64_t c : d) count[size_t(c)] += 1;
    for (size_t c = 0; c < 6; ++c) {
      const double n = double(d.size()), p = weights[c] / total;
      EXPECT_NEAR(count[c], n * p, 5 * std::sqrt(n * p * (1 - p)) + 1)
          << "category " << c << " replacement " << replacement;
    }
  }
}

TEST(CudaMultinomial, Errors) {
  EMBER_REQUIRE_CUDA();
  Tensor bad = from_vector<float>({1, -1}).to(cuda_device());
  EXPECT_TRUE(testing::throws_with([&] { multinomial(bad, 1); }, {"multinomial", "negative", "cuda:0"}));
  Tensor zero = zeros({2, 3}, DType::Float32, cuda_device());
  EXPECT_TRUE(testing::throws_with([&] { multinomial(zero, 1, true); }, {"multinomial", "sum to 0"}));
}

}  // namespace
}  // namespace ember
