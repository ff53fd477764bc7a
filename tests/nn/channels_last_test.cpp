// Module::to(MemoryFormat::ChannelsLast) on the CPU: the 4-D parameters
// change layout in place (the one-channel weight included), the CNN of
// examples/train computes the loss and gradients of its NCHW twin with
// channels-last gradients, Adam steps it alike (its state laid out as the
// parameters, through a state_dict round trip too), under bfloat16 autocast
// too (kept casts laid out as the weights), and state dicts load into it
// without changing its layout.
#include <gtest/gtest.h>

#include <vector>

#include "ember/ember.h"
#include "examples/train/models.h"

namespace ember {
namespace {

constexpr MemoryFormat kCL = MemoryFormat::ChannelsLast;

double max_diff(const Tensor& a, const Tensor& b) {
  std::vector<double> x = to_vector<double>(a.to(DType::Float64)), y = to_vector<double>(b.to(DType::Float64));
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}

struct Twins {
  std::shared_ptr<nn::Sequential> nchw, cl;
};

Twins make_twins() {
  manual_seed(3);
  auto net = train::make_cnn(0);
  net->to(DType::Float64);
  auto cl = nn::clone(net);
  cl->to(kCL);
  return {net, cl};
}

Tensor loss_of(nn::Sequential& net, uint64_t seed) {
  Generator g(seed);
  Tensor x = randn({4, 1, 28, 28}, DType::Float64, kCPU, &g);
  Tensor target = randint(0, 10, {4}, DType::Int64, kCPU, &g);
  return nn::functional::cross_entropy(net.forward(x), target);
}

TEST(ChannelsLastModule, ToLaysOutTheFourDimParametersInPlace) {
  Twins t = make_twins();
  auto params = t.cl->named_parameters();
  for (const auto& item : params) {
    const Tensor& p = item.value;
    if (p.dim() == 4) {
      EXPECT_EQ(p.suggest_memory_format(), kCL) << item.key;
    } else {
      EXPECT_TRUE(p.is_contiguous()) << item.key;
    }
  }
  EXPECT_EQ(params["0.weight"].strides(), (Shape{9, 1, 3, 1}));  // (32, 1, 3, 3): one channel, tagged
  EXPECT_EQ(params["4.weight"].strides(), (Shape{288, 1, 96, 32}));
  auto ref = t.nchw->named_parameters();
  for (const auto& item : params) EXPECT_EQ(max_diff(item.value, ref[item.key]), 0.0) << item.key;
  // And back.
  auto back = nn::clone(t.cl);
  back->to(MemoryFormat::Contiguous);
  for (const Tensor& p : back->parameters()) EXPECT_TRUE(p.is_contiguous());
}

TEST(ChannelsLastModule, CnnLossGradientsAndAdamStepsMatchNchw) {
  Twins t = make_twins();
  optim::Adam opt_ref(t.nchw->parameters(), {.lr = 1e-2});
  optim::Adam opt_cl(t.cl->parameters(), {.lr = 1e-2});
  for (int step = 0; step < 3; ++step) {
    opt_ref.zero_grad();
    opt_cl.zero_grad();
    Tensor l_ref = loss_of(*t.nchw, step), l_cl = loss_of(*t.cl, step);
    EXPECT_NEAR(l_cl.item<double>(), l_ref.item<double>(), 1e-12);
    l_ref.backward();
    l_cl.backward();
    auto ref = t.nchw->named_parameters();
    for (const auto& item : t.cl->named_parameters()) {
      const Tensor& p = item.value;
      EXPECT_LT(max_diff(p.grad(), ref[item.key].grad()), 1e-12) << item.key;
      EXPECT_EQ(p.grad().strides(), p.strides()) << item.key;
    }
    opt_ref.step();
    opt_cl.step();
  }
  auto ref = t.nchw->named_parameters();
  for (const auto& item : t.cl->named_parameters()) {
    EXPECT_LT(max_diff(item.value, ref[item.key]), 1e-12) << item.key;
    if (item.value.dim() == 4) EXPECT_EQ(item.value.suggest_memory_format(), kCL) << item.key;
  }
  // An optimizer resumed from a state dict (contiguous copies) steps alike.
  optim::Adam resumed(t.cl->parameters(), {.lr = 1e-2});
  resumed.load_state_dict(opt_ref.state_dict());
  auto cl2 = nn::clone(t.cl);
  cl2->to(kCL);
  optim::Adam continued(cl2->parameters(), {.lr = 1e-2});
  continued.load_state_dict(opt_cl.state_dict());
  for (auto* pair : {&resumed, &continued}) pair->zero_grad();
  loss_of(*t.cl, 9).backward();
  loss_of(*cl2, 9).backward();
  resumed.step();
  continued.step();
  auto p2 = cl2->named_parameters();
  for (const auto& item : t.cl->named_parameters()) EXPECT_LT(max_diff(item.value, p2[item.key]), 1e-12) << item.key;
}

// Under autocast the convolutions take bfloat16 casts of channels-last
// weights: the kept casts are channels-last too, so the fused Adam step
// rewrites them flat beside the weights, and every step equals the NCHW
// twin's bit for bit (the CPU kernels sum in the same order in either
// layout): a stale or permuted cast would show.
TEST(ChannelsLastModule, AutocastStepsMatchNchw) {
  manual_seed(4);
  auto nchw = train::make_cnn(0);
  auto cl = nn::clone(nchw);
  cl->to(kCL);
  optim::Adam opt_ref(nchw->parameters(), {.lr = 1e-2});
  optim::Adam opt_cl(cl->parameters(), {.lr = 1e-2});
  for (int step = 0; step < 3; ++step) {
    Generator g(step);
    Tensor x = randn({4, 1, 28, 28}, DType::Float32, kCPU, &g);
    Tensor target = randint(0, 10, {4}, DType::Int64, kCPU, &g);
    Tensor l_ref, l_cl;
    {
      amp::autocast region(DType::BFloat16, DeviceType::CPU);
      l_ref = nn::functional::cross_entropy(nchw->forward(x), target);
      l_cl = nn::functional::cross_entropy(cl->forward(x.to(kCL)), target);
    }
    EXPECT_EQ(l_cl.item<double>(), l_ref.item<double>()) << step;
    opt_ref.zero_grad();
    opt_cl.zero_grad();
    l_ref.backward();
    l_cl.backward();
    opt_ref.step();
    opt_cl.step();
  }
  auto ref = nchw->named_parameters();
  for (const auto& item : cl->named_parameters()) {
    EXPECT_EQ(max_diff(item.value, ref[item.key]), 0.0) << item.key;
    if (item.value.dim() == 4) EXPECT_EQ(item.value.suggest_memory_format(), kCL) << item.key;
  }
}

TEST(ChannelsLastModule, StateDictsLoadWithoutChangingTheLayout) {
  Twins t = make_twins();
  manual_seed(8);
  auto other = train::make_cnn(0);
  other->to(DType::Float64);
  t.cl->load_state_dict(other->state_dict());
  auto loaded = t.cl->named_parameters();
  auto source = other->named_parameters();
  for (const auto& item : loaded) {
    EXPECT_EQ(max_diff(item.value, source[item.key]), 0.0) << item.key;
    if (item.value.dim() == 4) EXPECT_EQ(item.value.suggest_memory_format(), kCL) << item.key;
  }
}

}  // namespace
}  // namespace ember
