// The Optimizer base: parameter groups, zero_grad, state dicts that resume
// a run exactly, mixed-precision skipping (found_inf / inv_scale) and errors.
#include "ember/optim/optimizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ember/ember.h"
#include "ember/optim/adam.h"
#include "ember/optim/sgd.h"
#include "support/error_message.h"

namespace ember {
namespace {

using optim::Adam;
using optim::AdamOptions;
using optim::ParamGroup;
using optim::SGD;
using optim::SGDOptions;
using testing::error_of;
using ::testing::HasSubstr;

Tensor leaf(const std::vector<double>& v, DType dtype = DType::Float64) {
  return from_vector<double>(v, {int64_t(v.size())}).to(dtype).set_requires_grad();
}

// A deterministic gradient for step s of parameter k.
Tensor grad_for(const Tensor& p, int s, int k) {
  Tensor g = arange(0, double(p.numel()), 1, DType::Float64);
  return sin(g * (0.7 + 0.3 * k) + double(s)).to(p.dtype()).reshape(p.shape());
}

TEST(Optimizer, GroupsWithDifferentLrs) {
  Tensor a = leaf({1.0, 2.0}), b = leaf({3.0});
  SGD opt({ParamGroup({a}), ParamGroup({b}, {{"lr", 0.5}})}, SGDOptions{.lr = 0.1});
  ASSERT_EQ(opt.param_groups().size(), 2u);
  EXPECT_EQ(opt.param_groups()[0].lr(), 0.1);
  EXPECT_EQ(opt.param_groups()[1].lr(), 0.5);
  EXPECT_EQ(opt.param_groups()[1].get("momentum"), 0.0) << "options a group lacks come from the defaults";
  a.set_grad(from_vector<double>({1.0, 1.0}));
  b.set_grad(from_vector<double>({1.0}));
  opt.step();
  EXPECT_EQ(to_vector<double>(a), (std::vector<double>{0.9, 1.9}));
  EXPECT_EQ(to_vector<double>(b), (std::vector<double>{2.5}));
  // A scheduler-style change of one group's lr.
  opt.param_groups()[0].set_lr(1.0);
  opt.step();
  EXPECT_EQ(to_vector<double>(a), (std::vector<double>{0.9 - 1.0, 1.9 - 1.0}));
}

TEST(Optimizer, AddParamGroupChecks) {
  Tensor a = leaf({1.0}), b = leaf({2.0});
  Adam opt({a});
  EXPECT_THAT(error_of([&] { opt.add_param_group(ParamGroup({a})); }),
              HasSubstr("some parameters appear in more than one parameter group"));
  EXPECT_THAT(error_of([&] {
                opt.add_param_group(ParamGroup({b}, {{"momentum", 0.9}}));
              }),
              HasSubstr("Adam: unknown option \"momentum\""));
  Tensor non_leaf = a * 2.0;
  EXPECT_THAT(error_of([&] { opt.add_param_group(ParamGroup({non_leaf})); }),
              HasSubstr("can't optimize a non-leaf tensor"));
  Tensor ints = from_vector<int64_t>({1, 2});
  EXPECT_THAT(error_of([&] { opt.add_param_group(ParamGroup({ints})); }),
              HasSubstr("can only optimize floating tensors"));
  opt.add_param_group(ParamGroup({b}, {{"lr", 0.5}}));
  EXPECT_EQ(opt.param_groups()[1].get("beta1"), 0.9);
  EXPECT_THAT(error_of([&] { opt.param_groups()[1].set("betas", 1.0); }), HasSubstr("cannot set option \"betas\""));
}

TEST(Optimizer, ZeroGradToNoneOrZero) {
  Tensor a = leaf({1.0, 2.0});
  SGD opt({a});
  a.set_grad(from_vector<double>({3.0, 4.0}));
  opt.zero_grad(false);
  ASSERT_TRUE(a.grad().defined());
  EXPECT_EQ(to_vector<double>(a.grad()), (std::vector<double>{0.0, 0.0}));
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
}

TEST(Optimizer, ParamsWithoutGradAreUntouchedAndGetNoState) {
  Tensor a = leaf({1.0}), b = leaf({2.0});
  Adam opt({a, b}, AdamOptions{.lr = 0.1});
  a.set_grad(from_vector<double>({1.0}));
  const uint32_t version = a.version();
  opt.step();
  EXPECT_EQ(to_vector<double>(b), (std::vector<double>{2.0}));
  EXPECT_TRUE(opt.state(b).empty());
  EXPECT_EQ(opt.state(a).at("step").item<int64_t>(), 1);
  EXPECT_GT(a.version(), version) << "an in-place update bumps the version counter";
  EXPECT_THAT(error_of([&] { opt.state(leaf({0.0})); }), HasSubstr("is not a parameter of this optimizer"));
}

TEST(Optimizer, StepChecksBeforeChangingAnything) {
  Tensor a = from_vector<double>({1.0, 2.0, 3.0, 4.0}, {2, 2}).set_requires_grad();
  Tensor base = zeros({2, 2}, DType::Float64).set_requires_grad();
  SGD opt({a, base}, SGDOptions{.lr = 0.1});
  a.set_grad(ones({2, 2}, DType::Float64));
  base.set_grad(ones({2, 2}, DType::Float64));
  opt.param_groups()[0].set_lr(-1.0);
  EXPECT_THAT(error_of([&] { opt.step(); }), HasSubstr("SGD: invalid learning rate: -1"));
  EXPECT_EQ(to_vector<double>(a), (std::vector<double>{1.0, 2.0, 3.0, 4.0}));
}

TEST(Optimizer, ParameterThatIsNotOneDenseBlockIsAClearError) {
  Tensor base = zeros({2, 3}, DType::Float64);
  Tensor p = base.narrow(1, 0, 2).detach().set_requires_grad();
  ASSERT_FALSE(p.is_non_overlapping_and_dense());
  SGD opt({p});
  p.set_grad(ones({2, 2}, DType::Float64));
  EXPECT_THAT(error_of([&] { opt.step(); }), HasSubstr("SGD.step: parameter 0 ([2, 2] float64 on cpu, strides [3, 1]) "
                                                       "is not one dense block of memory"));
}

TEST(Optimizer, StateFollowsAParameterLaidOutAgainByModuleTo) {
  // Module::to(MemoryFormat) lays a weight out anew under the same tensor,
  // after its momentum and Adam moments were made NCHW: the next steps must
  // still pair each element with its own state.
  for (int which = 0; which < 2; ++which) {
    manual_seed(5);
    auto relaid = std::make_shared<nn::Conv2d>(3, 4, 3);
    manual_seed(5);
    auto twin = std::make_shared<nn::Conv2d>(3, 4, 3);
    relaid->to(kCPU, DType::Float64);
    twin->to(kCPU, DType::Float64);
    auto make = [&](TensorList params) -> std::unique_ptr<optim::Optimizer> {
      if (which == 0) return std::make_unique<SGD>(params, SGDOptions{.lr = 0.1, .momentum = 0.9});
      return std::make_unique<Adam>(params, AdamOptions{.lr = 0.1});
    };
    auto opt = make(relaid->parameters()), twin_opt = make(twin->parameters());
    for (int step = 0; step < 3; ++step) {
      if (step == 1) relaid->to(MemoryFormat::ChannelsLast);
      TensorList ps = relaid->parameters(), ts = twin->parameters();
      for (size_t i = 0; i < ps.size(); ++i) {
        Tensor g = randn(ps[i].shape(), DType::Float64);
        ps[i].set_grad(g.clone());
        ts[i].set_grad(g);
      }
      opt->step();
      twin_opt->step();
    }
    EXPECT_EQ(relaid->weight.suggest_memory_format(), MemoryFormat::ChannelsLast);
    EXPECT_EQ(to_vector<double>(relaid->weight.contiguous()), to_vector<double>(twin->weight)) << which;
    EXPECT_EQ(to_vector<double>(relaid->bias), to_vector<double>(twin->bias)) << which;
  }
}

TEST(Optimizer, TransposedParameterStepsAsItsContiguousTwin) {
  // Any dense order is walked flat; a gradient laid out otherwise (here a
  // contiguous one for a transposed parameter) is copied into its layout.
  Tensor values = from_vector<double>({1, -2, 3, 0.5, 4, -1}, {2, 3});
  Tensor t = values.t().contiguous().t().detach().set_requires_grad();  // (2, 3) with strides (1, 2)
  Tensor c = values.clone().set_requires_grad();
  ASSERT_FALSE(t.is_contiguous());
  Adam a({t}, {.lr = 0.1}), b({c}, {.lr = 0.1});
  for (int step = 0; step < 3; ++step) {
    Tensor g = from_vector<double>({0.5, 1, -1, 2, -0.25, 3}, {2, 3}) * double(step + 1);
    t.set_grad(g);
    c.set_grad(g.clone());
    a.step();
    b.step();
  }
  EXPECT_EQ(t.strides(), (Shape{1, 2}));
  EXPECT_EQ(to_vector<double>(t), to_vector<double>(c));
}

// Runs `steps` steps from step `from` on params with the deterministic grads.
void run(optim::Optimizer& opt, const TensorList& params, int from, int steps) {
  for (int s = from; s < from + steps; ++s) {
    for (size_t k = 0; k < params.size(); ++k) {
      Tensor p = params[k];
      p.set_grad(grad_for(p, s, int(k)));
    }
    opt.step();
  }
}

TensorList make_params(DType dtype) {
  NoGradGuard no_grad;
  return {(arange(0, 6, 1, DType::Float64) * 0.25 - 0.5).to(dtype).reshape({2, 3}).set_requires_grad(),
          (arange(0, 5, 1, DType::Float64) * -0.1 + 1.0).to(dtype).set_requires_grad()};
}

TensorList clones(const TensorList& ps) {
  NoGradGuard no_grad;
  TensorList out;
  for (const Tensor& p : ps) out.push_back(p.clone().detach().set_requires_grad());
  return out;
}

template <typename Make>
void expect_resume_is_exact(Make make, DType dtype) {
  // Six uninterrupted steps...
  TensorList straight = make_params(dtype);
  auto opt_a = make(straight);
  run(*opt_a, straight, 0, 6);
  // ...equal three steps, a state dict handed to a fresh optimizer over
  // copies of the params, and three more.
  TensorList first = make_params(dtype);
  auto opt_b = make(first);
  run(*opt_b, first, 0, 3);
  optim::OptimizerStateDict sd = opt_b->state_dict();
  TensorList resumed = clones(first);
  auto opt_c = make(resumed);
  opt_c->load_state_dict(sd);
  run(*opt_c, resumed, 3, 3);
  for (size_t k = 0; k < straight.size(); ++k) {
    EXPECT_TRUE(equal(resumed[k], straight[k])) << "parameter " << k << ":\n" << resumed[k] << "\nvs\n" << straight[k];
    for (const auto& [name, t] : opt_a->state(straight[k])) {
      EXPECT_TRUE(equal(opt_c->state(resumed[k]).at(name), t)) << name;
    }
  }
}

TEST(Optimizer, StateDictResumesExactly) {
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    expect_resume_is_exact(
        [](const TensorList& ps) {
          return std::make_unique<Adam>(
              std::vector<ParamGroup>{ParamGroup({ps[0]}), ParamGroup({ps[1]}, {{"lr", 0.05}})},
              AdamOptions{.lr = 0.01, .weight_decay = 0.1, .amsgrad = true});
        },
        dtype);
    expect_resume_is_exact(
        [](const TensorList& ps) {
          return std::make_unique<SGD>(ps,
                                       SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
        },
        dtype);
  }
}

TEST(Optimizer, StateDictLayoutFollowsPyTorch) {
  TensorList ps = make_params(DType::Float32);
  Adam opt({ParamGroup({ps[0]}), ParamGroup({ps[1]}, {{"lr", 0.5}})});
  ps[1].set_grad(ones({5}));
  opt.step();
  optim::OptimizerStateDict sd = opt.state_dict();
  ASSERT_EQ(sd.param_groups.size(), 2u);
  EXPECT_EQ(sd.param_groups[0].params, (std::vector<int64_t>{0}));
  EXPECT_EQ(sd.param_groups[1].params, (std::vector<int64_t>{1}));
  EXPECT_EQ(sd.param_groups[1].options.at("lr"), 0.5);
  ASSERT_EQ(sd.state.size(), 1u) << "only parameter 1 has been updated";
  EXPECT_EQ(sd.state.at(1).at("step").item<int64_t>(), 1);
  // The state dict holds copies: later steps do not change it.
  opt.step();
  EXPECT_EQ(sd.state.at(1).at("step").item<int64_t>(), 1);
}

TEST(Optimizer, LoadStateDictRejectsMismatchesAndChangesNothing) {
  TensorList ps = make_params(DType::Float32);
  Adam opt({ps[0], ps[1]});
  ps[0].set_grad(ones({2, 3}));
  opt.step();
  optim::OptimizerStateDict good = opt.state_dict();

  optim::OptimizerStateDict two_groups = good;
  two_groups.param_groups.push_back(good.param_groups[0]);
  EXPECT_THAT(error_of([&] { opt.load_state_dict(two_groups); }),
              HasSubstr("the state dict has 2 parameter groups, but the optimizer has 1"));

  optim::OptimizerStateDict bad_shape = good;
  bad_shape.state[0]["exp_avg"] = zeros({3, 2});
  bad_shape.param_groups[0].options["lr"] = 123.0;
  EXPECT_THAT(error_of([&] { opt.load_state_dict(bad_shape); }),
              HasSubstr("state \"exp_avg\" of parameter 0 is [3, 2] float32 on cpu, but the parameter is [2, 3]"));
  EXPECT_EQ(opt.param_groups()[0].lr(), 1e-3) << "a failed load changes nothing";

  optim::OptimizerStateDict unknown = good;
  unknown.state[0]["momentum_buffer"] = zeros({2, 3});
  EXPECT_THAT(error_of([&] { opt.load_state_dict(unknown); }), HasSubstr("unknown state \"momentum_buffer\""));

  optim::OptimizerStateDict no_step = good;
  no_step.state[0].erase("step");
  EXPECT_THAT(error_of([&] { opt.load_state_dict(no_step); }), HasSubstr("has no \"step\""));

  optim::OptimizerStateDict bad_index = good;
  bad_index.state[7] = good.state[0];
  EXPECT_THAT(error_of([&] { opt.load_state_dict(bad_index); }), HasSubstr("state for parameter index 7"));
}

TEST(Optimizer, FoundInfSkipsTheWholeStepOnCpu) {
  for (DType dtype : {DType::Float32, DType::Float16}) {
    SCOPED_TRACE(dtype_name(dtype));
    TensorList scaled = make_params(dtype), plain = make_params(dtype);
    Adam opt_scaled(scaled, AdamOptions{.lr = 0.1, .amsgrad = true});
    Adam opt_plain(plain, AdamOptions{.lr = 0.1, .amsgrad = true});
    run(opt_scaled, scaled, 0, 1);
    run(opt_plain, plain, 0, 1);
    // A step with found_inf set changes nothing, not even the step counters.
    Tensor found_inf = ones({1}), inv_scale = full({1}, 0.25);
    for (size_t k = 0; k < scaled.size(); ++k) scaled[k].set_grad(full_like(scaled[k], 1e30));
    TensorList before = clones(scaled);
    opt_scaled.step({found_inf, inv_scale});
    for (size_t k = 0; k < scaled.size(); ++k) {
      EXPECT_TRUE(equal(scaled[k], before[k]));
      EXPECT_EQ(opt_scaled.state(scaled[k]).at("step").item<int64_t>(), 1);
      EXPECT_TRUE(equal(opt_scaled.state(scaled[k]).at("exp_avg"), opt_plain.state(plain[k]).at("exp_avg")));
    }
    // With found_inf clear, gradients scaled by 4 and inv_scale 1/4 give
    // the same step as the plain optimizer's.
    found_inf.zero_();
    for (int s = 1; s < 3; ++s) {
      for (size_t k = 0; k < scaled.size(); ++k) {
        scaled[k].set_grad(grad_for(scaled[k], s, int(k)) * 4.0);
        plain[k].set_grad(grad_for(plain[k], s, int(k)));
      }
      opt_scaled.step({found_inf, inv_scale});
      opt_plain.step();
    }
    for (size_t k = 0; k < scaled.size(); ++k) {
      EXPECT_TRUE(equal(scaled[k], plain[k])) << scaled[k] << "\nvs\n" << plain[k];
      EXPECT_EQ(opt_scaled.state(scaled[k]).at("step").item<int64_t>(), 3);
    }
  }
}

TEST(Optimizer, SkippedFirstSgdStepLeavesTheBufferToTheNextGradient) {
  Tensor a = leaf({1.0, 2.0});
  SGD opt({a}, SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.5});
  a.set_grad(from_vector<double>({100.0, 100.0}));
  opt.step({ones({1}), Tensor()});
  EXPECT_EQ(to_vector<double>(a), (std::vector<double>{1.0, 2.0}));
  a.set_grad(from_vector<double>({1.0, -1.0}));
  opt.step({zeros({1}), Tensor()});
  // The first applied step: buf = g, undampened.
  EXPECT_EQ(to_vector<double>(opt.state(a).at("momentum_buffer")), (std::vector<double>{1.0, -1.0}));
  EXPECT_EQ(to_vector<double>(a), (std::vector<double>{0.9, 2.1}));
}

TEST(Optimizer, GradScalingTensorsAreChecked) {
  Tensor a = leaf({1.0});
  SGD opt({a});
  a.set_grad(from_vector<double>({1.0}));
  EXPECT_THAT(error_of([&] {
                opt.step({ones({1}, DType::Float64), Tensor()});
              }),
              HasSubstr("found_inf must be a one-element float32 tensor on cpu (the parameters' device), but got [1] "
                        "float64 on cpu"));
  EXPECT_THAT(error_of([&] { opt.step({Tensor(), ones({2})}); }), HasSubstr("inv_scale must be a one-element"));
}

}  // namespace
}  // namespace ember
