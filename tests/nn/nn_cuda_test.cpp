// nn on CUDA: modules moved with to(cuda) compute what they compute on the
// CPU (forward, loss and parameter gradients), state dicts cross devices,
// and a bad label is an error on the GPU too.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "ember/ember.h"
#include "support/cuda_compare.h"
#include "tiny_gpt.h"

namespace ember {
namespace {

using ::testing::HasSubstr;

constexpr testing::Tolerance kTol{1e-4, 1e-5};

// Runs step(module) on a CPU module and on a CUDA clone of it; compares the
// returned loss and every parameter's gradient.
template <typename M>
void expect_same_on_cuda(const std::shared_ptr<M>& cpu, const std::function<Tensor(M&, Device)>& step) {
  auto gpu = nn::clone(cpu);
  gpu->to(cuda_device(0));
  for (const Tensor& p : gpu->parameters()) ASSERT_TRUE(p.is_cuda());
  Tensor loss_cpu = step(*cpu, kCPU), loss_gpu = step(*gpu, cuda_device(0));
  loss_cpu.backward();
  loss_gpu.backward();
  EXPECT_TRUE(testing::tensors_close(loss_gpu.cpu(), loss_cpu, kTol));
  auto gp = gpu->named_parameters();
  for (const auto& item : cpu->named_parameters()) {
    ASSERT_TRUE(gp.at(item.key).grad().defined()) << item.key;
    EXPECT_TRUE(testing::tensors_close(gp.at(item.key).grad().cpu(), item.value.grad(), kTol)) << item.key;
  }
}

TEST(NnCuda, TinyGptMatchesCpu) {
  EMBER_REQUIRE_CUDA();
  manual_seed(2);
  auto gpt = std::make_shared<testing::TinyGpt>(13, 16, 4, 8);
  Tensor idx = randint(0, 13, {3, 8});
  expect_same_on_cuda<testing::TinyGpt>(gpt, [&](testing::TinyGpt& m, Device d) {
    Tensor i = idx.to(d);
    Tensor logits = m.forward(i.narrow(1, 0, 7));
    return nn::functional::cross_entropy(logits.reshape({-1, 13}), i.narrow(1, 1, 7).reshape({-1}),
                                         {.label_smoothing = 0.1});
  });
}

TEST(NnCuda, ConvNetMatchesCpu) {
  EMBER_REQUIRE_CUDA();
  manual_seed(3);
  auto net = std::make_shared<nn::Sequential>(
      std::make_shared<nn::Conv2d>(3, 8, 3, 1, 1), std::make_shared<nn::BatchNorm2d>(8), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Conv2d>(8, 8, 3, 2, 1, 1, 2),
      std::make_shared<nn::AvgPool2d>(2), std::make_shared<nn::AdaptiveAvgPool2d>(1), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Dropout>(0.0), std::make_shared<nn::Linear>(8, 4));
  Tensor x = randn({4, 3, 16, 16});
  Tensor y = from_vector<int64_t>({0, 3, 1, 2});
  expect_same_on_cuda<nn::Sequential>(
      net, [&](nn::Sequential& m, Device d) { return nn::functional::cross_entropy(m(x.to(d)), y.to(d)); });
  // The running statistics were updated the same way on both devices.
  auto gpu = nn::clone(net);
  gpu->to(cuda_device(0));
  (*gpu)(x.cuda());
  (*net)(x);
  auto a = net->state_dict(), b = gpu->state_dict();
  for (const auto& item : a) EXPECT_TRUE(testing::tensors_close(b.at(item.key).cpu(), item.value, kTol)) << item.key;
}

TEST(NnCuda, ChannelsLastConvNetMatchesCpu) {
  EMBER_REQUIRE_CUDA();
  manual_seed(4);
  auto net = std::make_shared<nn::Sequential>(
      std::make_shared<nn::Conv2d>(1, 16, 3, 1, 1, 1, 1, false), std::make_shared<nn::BatchNorm2d>(16),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Conv2d>(16, 8, 3, 1, 1),
      std::make_shared<nn::BatchNorm2d>(8), std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2),
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Dropout>(0.25), std::make_shared<nn::Linear>(8 * 4 * 4, 4));
  net->to(MemoryFormat::ChannelsLast);
  Tensor x = randn({6, 1, 16, 16});
  Tensor y = from_vector<int64_t>({0, 3, 1, 2, 2, 0});
  // Dropout draws the same mask on both devices from one seed.
  expect_same_on_cuda<nn::Sequential>(net, [&](nn::Sequential& m, Device d) {
    manual_seed(5);
    return nn::functional::cross_entropy(m(x.to(d)), y.to(d));
  });
  auto gpu = nn::clone(net);
  gpu->to(cuda_device(0));
  for (const Tensor& p : gpu->parameters()) {
    if (p.dim() == 4) EXPECT_EQ(p.suggest_memory_format(), MemoryFormat::ChannelsLast);
  }
}

TEST(NnCuda, StateDictCrossesDevicesAndToKeepsHandles) {
  EMBER_REQUIRE_CUDA();
  auto cpu = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::BatchNorm1d>(3));
  auto gpu = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::BatchNorm1d>(3));
  Tensor before = gpu->at<nn::Linear>(0)->weight;
  gpu->to(cuda_device(0));
  EXPECT_TRUE(before.is_same(gpu->at<nn::Linear>(0)->weight));
  EXPECT_TRUE(before.is_cuda());
  gpu->load_state_dict(cpu->state_dict());
  for (const auto& item : gpu->state_dict()) EXPECT_TRUE(item.value.is_cuda()) << item.key;
  Tensor x = randn({5, 4});
  EXPECT_TRUE(testing::tensors_close((*gpu)(x.cuda()).cpu(), (*cpu)(x), kTol));
  auto back = nn::clone(gpu);
  EXPECT_TRUE(back->at<nn::Linear>(0)->weight.is_cuda());
}

TEST(NnCuda, OutOfRangeLabelIsAnErrorOnTheGpu) {
  EMBER_REQUIRE_CUDA();
  Tensor logits = zeros({3, 5}, DType::Float32, cuda_device(0)).set_requires_grad();
  // The loss and its backward do not wait for the GPU's check of the
  // targets; reading the loss does, and raises the error.
  try {
    Tensor loss = nn::functional::cross_entropy(logits, from_vector<int64_t>({0, 9, -100}).cuda());
    loss.backward();
    loss.item<double>();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cross_entropy: a target is not a class index for 5 classes"));
    EXPECT_THAT(e.what(), HasSubstr("index 9 is out of bounds"));
    EXPECT_THAT(e.what(), HasSubstr("found on cuda:0 at position 1"));
  }
  EXPECT_NO_THROW(cuda::synchronize(0)) << "the error is raised once";
  // The device keeps working after the error.
  Tensor ok = nn::functional::cross_entropy(logits, from_vector<int64_t>({0, 4, -100}).cuda());
  EXPECT_NEAR(ok.item<double>(), std::log(5.0), 1e-6);
}

}  // namespace
}  // namespace ember
