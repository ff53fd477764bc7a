// "O2" mixed precision (ember/parallel/amp/master_weights.h): a model cast to half
// with its BatchNorm kept in float32, float32 master weights, and a
// training loop with GradScaler that learns.
#include <gtest/gtest.h>

#include <memory>

#include "ember/ember.h"
#include "support/error_message.h"

namespace ember {
namespace {

using testing::throws_with;

std::shared_ptr<nn::Sequential> small_cnn() {
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Conv2d>(1, 4, 3, 1, 1),
                                          std::make_shared<nn::BatchNorm2d>(4), std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(4 * 6 * 6, 3));
}

class HalfModel : public ::testing::TestWithParam<DType> {};

TEST_P(HalfModel, CastKeepsBatchNormInFloat32Exactly) {
  const DType low = GetParam();
  manual_seed(1);
  auto model = small_cnn();
  auto bn = model->at<nn::BatchNorm2d>(1);
  {
    NoGradGuard no_grad;  // values that half would round
    bn->running_mean.copy_(randn({4}) * 0.1234567);
    bn->weight.copy_(rand({4}) + 0.1234567);
  }
  Tensor mean_before = bn->running_mean.clone(), weight_before = bn->weight.detach().clone();
  amp::cast_to_half(*model, low);
  EXPECT_EQ(model->at<nn::Conv2d>(0)->weight.dtype(), low);
  EXPECT_EQ(model->at<nn::Linear>(4)->weight.dtype(), low);
  EXPECT_EQ(bn->weight.dtype(), DType::Float32);
  EXPECT_EQ(bn->running_var.dtype(), DType::Float32);
  EXPECT_EQ(bn->num_batches_tracked.dtype(), DType::Int64);
  EXPECT_TRUE(equal(bn->running_mean, mean_before));
  EXPECT_TRUE(equal(bn->weight, weight_before));
  // The half model runs on half input; BatchNorm normalizes in float32.
  Tensor y = model->forward(randn({2, 1, 6, 6}).to(low));
  EXPECT_EQ(y.dtype(), low);
  EXPECT_TRUE(throws_with([&] { amp::cast_to_half(*model, DType::Float32); }, {"cast_to_half", "float32"}));
}

TEST_P(HalfModel, MasterWeightsCopyGradsAndWeights) {
  const DType low = GetParam();
  manual_seed(2);
  auto model = small_cnn();
  amp::cast_to_half(*model, low);
  amp::MasterWeights master(model->parameters());
  const TensorList params = model->parameters();
  ASSERT_EQ(master.params().size(), params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& m = master.params()[i];
    EXPECT_EQ(m.dtype(), DType::Float32) << i;
    EXPECT_TRUE(m.is_leaf() && m.requires_grad()) << i;
    // float32 parameters (BatchNorm's) are their own masters.
    EXPECT_EQ(m.is_same(params[i]), params[i].dtype() == DType::Float32) << i;
    EXPECT_TRUE(equal(m.to(params[i].dtype()), params[i])) << i;
  }
  Tensor loss = model->forward(randn({2, 1, 6, 6}).to(low)).to(DType::Float32).sum();
  loss.backward();
  master.grads_to_master();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(master.params()[i].grad().dtype(), DType::Float32) << i;
    EXPECT_TRUE(equal(master.params()[i].grad().to(params[i].dtype()), params[i].grad())) << i;
  }
  {
    NoGradGuard no_grad;
    for (const Tensor& m : master.params()) Tensor(m).add_(0.01);
  }
  master.master_to_model();
  for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(equal(params[i], master.params()[i].to(params[i].dtype())));
  // A parameter without gradient leaves its master without one.
  model->zero_grad();
  master.grads_to_master();
  EXPECT_FALSE(master.params()[0].grad().defined());
}

TEST_P(HalfModel, LearnsWithGradScaler) {
  const DType low = GetParam();
  manual_seed(3);
  auto model = small_cnn();
  amp::cast_to_half(*model, low);
  amp::MasterWeights master(model->parameters());
  optim::Adam adam(master.params(), optim::AdamOptions{.lr = 0.01});
  amp::GradScaler scaler;
  // Three classes told apart by the mean brightness of the image.
  Tensor labels = randint(0, 3, {24});
  Tensor images = randn({24, 1, 6, 6}) * 0.3 + labels.to(DType::Float32).view({24, 1, 1, 1}) - 1.0;
  auto loss_of = [&] {
    return nn::functional::cross_entropy(model->forward(images.to(low)).to(DType::Float32), labels);
  };
  const double first = loss_of().item<double>();
  for (int step = 0; step < 40; ++step) {
    model->zero_grad();
    scaler.scale(loss_of()).backward();
    master.grads_to_master();
    scaler.step(adam);
    scaler.update();
    master.master_to_model();
  }
  EXPECT_LT(loss_of().item<double>(), first / 4);
  EXPECT_EQ(model->at<nn::BatchNorm2d>(1)->running_mean.dtype(), DType::Float32);
}

INSTANTIATE_TEST_SUITE_P(, HalfModel, ::testing::Values(DType::Float16, DType::BFloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(MasterWeights, RejectsNonLeavesAndIntegers) {
  Tensor leaf = randn({2}).set_requires_grad();
  EXPECT_TRUE(throws_with([&] { amp::MasterWeights m(TensorList{leaf * 2.0}); }, {"MasterWeights", "leaf"}));
  EXPECT_TRUE(throws_with([&] { amp::MasterWeights m(TensorList{zeros({2}, DType::Int64)}); }, {"floating"}));
}

}  // namespace
}  // namespace ember
