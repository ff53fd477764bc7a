// Sequential and ModuleList: chaining, indexing, typed access, errors,
// nesting and clone.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>

#include "ember/ember.h"
#include "support/gradcheck.h"

namespace ember {
namespace {

using ::testing::HasSubstr;

TEST(NnSequential, ChainsItsMembersInOrder) {
  auto seq = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::Tanh>(),
                                              std::make_shared<nn::Linear>(3, 2));
  seq->to(DType::Float64);
  Tensor x = testing::random_leaf({5, 4}, 1);
  auto l0 = seq->at<nn::Linear>(0), l2 = seq->at<nn::Linear>(-1);
  Tensor expect = matmul(tanh(matmul(x, l0->weight.t()) + l0->bias), l2->weight.t()) + l2->bias;
  EXPECT_TRUE(allclose((*seq)(x), expect, 1e-12, 1e-12));
  TensorList inputs{x};
  for (const Tensor& p : seq->parameters()) inputs.push_back(p);
  EXPECT_TRUE(testing::gradcheck([&](const TensorList& in) { return (*seq)(in[0]); }, inputs));

  EXPECT_EQ(seq->size(), 3u);
  EXPECT_EQ((*seq)[1]->name(), "Tanh");
  EXPECT_EQ((*seq)[-1].get(), l2.get());
  int count = 0;
  for (const auto& m : *seq) count += m != nullptr;
  EXPECT_EQ(count, 3);

  auto empty_seq = std::make_shared<nn::Sequential>();
  EXPECT_TRUE(empty_seq->empty());
  EXPECT_TRUE((*empty_seq)(x).is_same(x));
}

TEST(NnSequential, IndexAndTypeErrors) {
  auto seq = std::make_shared<nn::Sequential>(std::make_shared<nn::ReLU>());
  try {
    (*seq)[3];
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("index 3 is out of range for a Sequential of size 1"));
  }
  try {
    seq->at<nn::Linear>(0);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("the member at 0 is a ReLU"));
  }
}

TEST(NnSequential, NamedMembersNestingAndClone) {
  auto inner = std::make_shared<nn::Sequential>();
  inner->push_back("fc", std::make_shared<nn::Linear>(2, 2));
  inner->push_back("act", std::make_shared<nn::GELU>());
  auto outer = std::make_shared<nn::Sequential>(inner, std::make_shared<nn::Linear>(2, 1));
  EXPECT_EQ(outer->named_parameters().keys(),
            (std::vector<std::string>{"0.fc.weight", "0.fc.bias", "1.weight", "1.bias"}));
  auto copy = nn::clone(outer);
  EXPECT_EQ(copy->named_parameters().keys(), outer->named_parameters().keys());
  EXPECT_EQ(copy->str(), outer->str());
  Tensor x = randn({3, 2});
  EXPECT_TRUE(equal((*copy)(x), (*outer)(x)));
  EXPECT_NE(copy->at<nn::Sequential>(0)->at<nn::Linear>(0)->weight.data_ptr(),
            inner->at<nn::Linear>(0)->weight.data_ptr());
}

// A ReLU then a MaxPool2d run as the pooling, then the ReLU, when every
// window holds an input element: the values and the input's gradient equal
// the composition's exactly, on inputs with windows whose maximum is
// negative, zero or tied, overlapping and padded windows, dilation, ceil
// mode, float32 and float64. With padding and dilation in one dim (where a
// window of padding alone pools to -inf) the ReLU runs first, as does a
// subclass of ReLU.
TEST(NnSequential, ReluThenMaxPoolRunsAsPoolThenRelu) {
  struct Pool {
    Size2 kernel, stride, padding, dilation;
    bool ceil, swapped;
  };
  const Pool pools[] = {{2, 2, 0, 1, false, true}, {3, 2, 1, 1, false, true},  {3, 1, 0, 2, false, true},
                        {2, 2, 0, 1, true, true},  {3, 1, 1, 2, false, false}, {3, 1, {0, 1}, {1, 2}, false, false}};
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (const Pool& p : pools) {
      auto seq = std::make_shared<nn::Sequential>(
          std::make_shared<nn::ReLU>(),
          std::make_shared<nn::MaxPool2d>(p.kernel, p.stride, p.padding, p.dilation, p.ceil));
      Generator gen(3);
      // Values on a coarse grid (ties, exact zeros), mostly negative so that some windows hold no positive.
      const Tensor base = randint(-4, 3, {2, 3, 9, 7}, DType::Int64, kCPU, &gen).to(DType::Float64) * 0.5;
      const Tensor x = base.to(dtype).set_requires_grad();
      const Tensor y = (*seq)(x);
      ASSERT_NE(y.grad_fn(), nullptr);
      EXPECT_EQ(y.grad_fn()->name(), p.swapped ? "ReluBackward" : "MaxPool2dBackward");
      const Tensor xc = base.to(dtype).set_requires_grad();
      const Tensor expect = max_pool2d(relu(xc), p.kernel, p.stride, p.padding, p.dilation, p.ceil);
      ASSERT_EQ(y.shape(), expect.shape());
      EXPECT_TRUE(equal(y, expect));
      const Tensor g = randn(y.shape(), DType::Float64, kCPU, &gen).to(dtype);
      y.backward(g);
      expect.backward(g);
      EXPECT_TRUE(equal(x.grad(), xc.grad())) << "kernel " << p.kernel.h << " stride " << p.stride.h;
      EXPECT_GT(xc.grad().abs().sum().item<double>(), 0.0);
    }
  }
  // A window of padding alone: -inf from the pool, which the ReLU after it would make 0.
  auto empty_window =
      std::make_shared<nn::Sequential>(std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2, 2, 1, 2));
  const Tensor one = full({1, 1, 1, 1}, 3.0);
  EXPECT_TRUE(equal((*empty_window)(one), max_pool2d(relu(one), 2, 2, 1, 2)));
  EXPECT_EQ((*empty_window)(one).item<float>(), -std::numeric_limits<float>::infinity());

  struct Leakyish : nn::ReLU {
    Tensor forward(const Tensor& input) override { return nn::ReLU::forward(input) - 1.0; }
  };
  auto sub = std::make_shared<nn::Sequential>(std::make_shared<Leakyish>(), std::make_shared<nn::MaxPool2d>(2));
  const Tensor x = randn({1, 1, 4, 4});
  EXPECT_TRUE(equal((*sub)(x), max_pool2d(relu(x) - 1.0, 2)));
}

TEST(NnModuleList, HoldsAnyModulesByPosition) {
  auto list = std::make_shared<nn::ModuleList>();
  list->push_back(std::make_shared<nn::MultiheadAttention>(4, 2));
  list->push_back(std::make_shared<nn::LayerNorm>(Shape{4}));
  EXPECT_EQ(list->size(), 2u);
  EXPECT_EQ(list->named_parameters().keys(),
            (std::vector<std::string>{"0.in_proj_weight", "0.in_proj_bias", "0.out_proj.weight", "0.out_proj.bias",
                                      "1.weight", "1.bias"}));
  auto attn = list->at<nn::MultiheadAttention>(0);
  EXPECT_EQ(attn->embed_dim, 4);
  auto copy = nn::clone(list);
  auto a = list->state_dict(), b = copy->state_dict();
  for (const auto& item : a) EXPECT_TRUE(equal(item.value, b.at(item.key))) << item.key;
  try {
    (*list)[-3];
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("index -3 is out of range for a ModuleList of size 2"));
  }
}

}  // namespace
}  // namespace ember
