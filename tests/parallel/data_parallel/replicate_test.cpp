// parallel::replicate and ReplicaSet on CPU "devices": replica values and
// memory, the BroadcastBackward tie to the original, buffers, training
// flags, the fast mode's changed-only copies, and rebuilding.
#include "ember/parallel/data_parallel/replicate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ember/ember.h"
#include "examples/train/models.h"
#include "support/error_message.h"

namespace ember::parallel {
namespace {

using ember::testing::throws_with;

struct CountingTransport : BucketTransport {
  size_t broadcasts = 0, destinations = 0;
  void broadcast(const Tensor& source, const TensorList& dsts) override {
    ++broadcasts;
    destinations += dsts.size();
    copy_transport()->broadcast(source, dsts);
  }
  Tensor reduce_sum(const TensorList& sources, Device destination) override {
    return copy_transport()->reduce_sum(sources, destination);
  }
};

std::shared_ptr<nn::Sequential> small_net() {
  manual_seed(11);
  auto net = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 6), std::make_shared<nn::ReLU>(),
                                              std::make_shared<nn::BatchNorm1d>(6), std::make_shared<nn::Linear>(6, 3));
  return net;
}

TEST(ParallelReplicate, ReplicasHoldCopiesTiedToTheOriginal) {
  auto net = small_net();
  std::vector<std::shared_ptr<nn::Module>> rs = replicate(net, {kCPU, kCPU, kCPU});
  ASSERT_EQ(rs.size(), 3u);
  EXPECT_EQ(rs[0].get(), net.get()) << "replica 0 is the module itself";
  auto mine = net->named_parameters();
  for (size_t k = 1; k < 3; ++k) {
    EXPECT_EQ(rs[k]->name(), "Sequential");
    auto theirs = rs[k]->named_parameters();
    ASSERT_EQ(theirs.keys(), mine.keys());
    for (const auto& item : mine) {
      const Tensor& p = theirs.at(item.key);
      EXPECT_TRUE(equal(p, item.value)) << item.key;
      EXPECT_NE(p.storage(), item.value.storage()) << item.key;
      ASSERT_NE(p.grad_fn(), nullptr) << item.key;
      EXPECT_EQ(p.grad_fn()->name(), "BroadcastBackward");
    }
    auto buffers = rs[k]->named_buffers();
    for (const auto& item : net->named_buffers()) {
      EXPECT_TRUE(equal(buffers.at(item.key), item.value));
      EXPECT_NE(buffers.at(item.key).storage(), item.value.storage()) << "buffers are copies";
    }
  }
  // The member handles of the layers see the replica's tensors.
  auto r1 = std::dynamic_pointer_cast<nn::Sequential>(rs[1]);
  EXPECT_TRUE(r1->at<nn::Linear>(0)->weight.is_same(rs[1]->named_parameters().at("0.weight")));
  EXPECT_EQ(r1->at<nn::Linear>(0)->weight.grad_fn()->name(), "BroadcastBackward");

  NoGradGuard no_grad;
  for (const auto& item : replicate(net, {kCPU, kCPU})[1]->named_parameters()) {
    EXPECT_EQ(item.value.grad_fn(), nullptr) << "no history with grad mode off";
  }
}

TEST(ParallelReplicate, GradientsOfTheOriginalAreTheSumOverReplicas) {
  auto net = small_net();
  net->eval();  // so that each replica's output does not depend on its batch
  auto ref = nn::clone(net);
  Tensor x0 = randn({5, 4}), x1 = randn({3, 4}), x2 = randn({4, 4});
  std::vector<std::shared_ptr<nn::Module>> rs = replicate(net, {kCPU, kCPU, kCPU});
  auto fwd = [](const std::shared_ptr<nn::Module>& m, const Tensor& x) {
    return std::static_pointer_cast<nn::UnaryModule>(m)->forward(x);
  };
  (fwd(rs[0], x0).sum() + square(fwd(rs[1], x1)).sum() + fwd(rs[2], x2).sum() * 3.0).backward();
  (fwd(ref, x0).sum() + square(fwd(ref, x1)).sum() + fwd(ref, x2).sum() * 3.0).backward();
  auto expect = ref->named_parameters();
  for (const auto& item : net->named_parameters()) {
    ASSERT_TRUE(item.value.grad().defined()) << item.key;
    EXPECT_TRUE(allclose(item.value.grad(), expect.at(item.key).grad(), 1e-4, 1e-5)) << item.key;
  }
  for (size_t k = 1; k < 3; ++k) {
    for (const Tensor& p : rs[k]->parameters()) EXPECT_FALSE(p.grad().defined()) << "replicas keep no grad";
  }
}

TEST(ParallelReplicate, FrozenParametersAreCopiedButNotTied) {
  auto net = small_net();
  net->at<nn::Linear>(0)->weight.set_requires_grad(false);
  auto rs = replicate(net, {kCPU, kCPU});
  const Tensor w = rs[1]->named_parameters().at("0.weight");
  EXPECT_TRUE(equal(w, net->at<nn::Linear>(0)->weight));
  EXPECT_FALSE(w.requires_grad());
  EXPECT_EQ(w.grad_fn(), nullptr);
}

TEST(ParallelReplicate, TheModuleMustBeOnTheFirstDevice) {
  auto net = small_net();
  EXPECT_TRUE(throws_with(
      [&] {
        replicate(net, {cuda_device(0), cuda_device(1)});
      },
      {"module must have its parameters and buffers on device cuda:0 (device_ids[0]) but found "
       "one of them on device: cpu",
       "(parameter '0.weight')", "call module->to(cuda:0) before wrapping it"}));
  EXPECT_TRUE(throws_with([&] { replicate(nullptr, {kCPU}); }, {"the module is null"}));
  EXPECT_TRUE(throws_with([&] { replicate(net, {}); }, {"no devices"}));
}

TEST(ParallelReplicaSet, TrainingFlagsFollowTheOriginal) {
  auto net = small_net();
  ReplicaSet set(net, {kCPU, kCPU});
  EXPECT_TRUE(set.update(2)[1]->is_training());
  net->at<nn::BatchNorm1d>(2)->eval();
  auto r1 = std::dynamic_pointer_cast<nn::Sequential>(set.update(2)[1]);
  EXPECT_TRUE(r1->is_training());
  EXPECT_FALSE(r1->at<nn::BatchNorm1d>(2)->is_training());
  net->eval();
  EXPECT_FALSE(set.update(2)[1]->is_training());
}

TEST(ParallelReplicaSet, FastModeSendsOnlyWhatChanged) {
  auto net = small_net();
  net->at<nn::Linear>(3)->weight.set_requires_grad(false);  // frozen: its own bucket
  auto transport = std::make_shared<CountingTransport>();
  ReplicaSet set(net, {kCPU, kCPU, kCPU}, ReplicationMode::Fast, kDefaultBucketBytes, transport);
  // Buckets: trainable parameters, the frozen weight, 3 BatchNorm buffers.
  std::vector<std::shared_ptr<nn::Module>> rs = set.update(3);
  EXPECT_EQ(transport->broadcasts, 5u) << "everything at first";
  EXPECT_EQ(transport->destinations, 10u);
  transport->broadcasts = transport->destinations = 0;
  set.update(3);
  EXPECT_EQ(transport->broadcasts, 0u) << "nothing changed";
  {
    NoGradGuard no_grad;
    net->at<nn::Linear>(0)->bias.add_(1.0);  // as an optimizer step does
  }
  set.update(3);
  EXPECT_EQ(transport->broadcasts, 1u) << "only the trainable bucket";
  EXPECT_EQ(transport->destinations, 2u);
  auto r2 = std::dynamic_pointer_cast<nn::Sequential>(set.update(3)[2]);
  EXPECT_TRUE(equal(r2->at<nn::Linear>(0)->bias, net->at<nn::Linear>(0)->bias));
  EXPECT_EQ(set.update(3)[1].get(), rs[1].get()) << "the replicas are kept";
  // A replica's own write (a BatchNorm forward) is undone at the next update.
  transport->broadcasts = 0;
  {
    NoGradGuard no_grad;
    r2->at<nn::BatchNorm1d>(2)->running_mean.fill_(7.0);
  }
  set.update(3);
  EXPECT_EQ(transport->broadcasts, 1u);
  EXPECT_TRUE(equal(r2->at<nn::BatchNorm1d>(2)->running_mean, net->at<nn::BatchNorm1d>(2)->running_mean));
  // Fewer devices this time: replica 2 is brought up to date when next used.
  {
    NoGradGuard no_grad;
    net->at<nn::Linear>(0)->bias.add_(1.0);
  }
  set.update(2);
  EXPECT_FALSE(equal(r2->at<nn::Linear>(0)->bias, net->at<nn::Linear>(0)->bias));
  set.update(3);
  EXPECT_TRUE(equal(r2->at<nn::Linear>(0)->bias, net->at<nn::Linear>(0)->bias));
}

TEST(ParallelReplicaSet, AChangedLayoutRebuildsTheReplicas) {
  for (ReplicationMode mode : {ReplicationMode::Classic, ReplicationMode::Fast}) {
    auto net = small_net();
    ReplicaSet set(net, {kCPU, kCPU}, mode);
    auto before = set.update(2)[1];
    net->to(DType::Float64);
    auto after = set.update(2)[1];
    EXPECT_NE(before.get(), after.get());
    for (const Tensor& p : after->parameters()) EXPECT_EQ(p.dtype(), DType::Float64);
    EXPECT_TRUE(equal(after->parameters()[0], net->parameters()[0]));
  }
}

}  // namespace
}  // namespace ember::parallel
