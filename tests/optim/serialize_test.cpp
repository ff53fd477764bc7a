// optim::save / optim::load (ember/optim/serialize.h): an optimizer's state in
// PyTorch's layout. tests/nn/torch_interop.py checks the files against
// torch.optim itself; these tests check ember's side: the layout, exact
// resumption, and the errors.
#include "ember/optim/serialize.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "ember/core/ops.h"
#include "ember/nn/safetensors.h"
#include "ember/optim/adam.h"
#include "ember/optim/sgd.h"
#include "tests/support/error_message.h"

namespace ember::optim {
namespace {

namespace fs = std::filesystem;
using ember::testing::throws_with;

std::string temp_path(const char* name) {
  return (fs::temp_directory_path() / ("ember_optim_" + std::to_string(::getpid()) + "_" + name)).string();
}

// Two parameters; each step gives them gradients that depend on the step.
struct Params {
  Tensor w = randn({3, 4}).set_requires_grad();
  Tensor b = randn({4}).set_requires_grad();
  TensorList list() const { return {w, b}; }
};

void step(Optimizer& optimizer, const Params& p, int i) {
  optimizer.zero_grad();
  (sum(p.w * p.w * double(i + 1)) + sum(sin(p.b))).backward();
  optimizer.step();
}

TEST(OptimSerialize, WritesPyTorchsNamesAndResumesExactly) {
  manual_seed(5);
  Params p;
  AdamOptions o;
  o.lr = 0.1;
  o.amsgrad = true;
  AdamW optimizer(p.list(), o);
  for (int i = 0; i < 3; ++i) step(optimizer, p, i);
  const std::string path = temp_path("adamw.safetensors");
  save(optimizer, path);

  const SafetensorsContents file = load_safetensors(path);
  EXPECT_EQ(file.metadata.at("optimizer"), "AdamW");
  EXPECT_EQ(file.metadata.at("param_groups"),
            "[{\"amsgrad\": true, \"betas\": [0.9, 0.999], \"eps\": 1e-08, \"lr\": 0.1, \"weight_decay\": 0.01, "
            "\"params\": [0, 1]}]");
  for (const char* name : {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}) {
    EXPECT_TRUE(file.tensors.count(std::string("state.1.") + name)) << name;
  }
  EXPECT_EQ(file.tensors.at("state.0.step").dtype(), DType::Float32);
  EXPECT_EQ(file.tensors.at("state.0.step").item<float>(), 3.0f);

  // A second optimizer over copies of the parameters, loaded from the file,
  // takes the same fourth step as the first.
  Params q;
  {
    NoGradGuard no_grad;
    q.w.copy_(p.w);
    q.b.copy_(p.b);
  }
  AdamW resumed(q.list(), AdamOptions{});
  load(resumed, path);
  EXPECT_EQ(resumed.param_groups()[0].lr(), 0.1);
  step(optimizer, p, 3);
  step(resumed, q, 3);
  EXPECT_TRUE(equal(p.w, q.w));
  EXPECT_TRUE(equal(p.b, q.b));
  fs::remove(path);
}

// What torch.optim.SGD(momentum=0.9).state_dict() holds after a step: a
// momentum buffer and no "step", and PyTorch's extra options.
TEST(OptimSerialize, LoadsPyTorchsSgdStateWithoutAStepCount) {
  manual_seed(6);
  Params p;
  SGDOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  SGD optimizer(p.list(), o);
  const Tensor buffer_w = randn({3, 4}), buffer_b = randn({4});
  const std::string path = temp_path("sgd.safetensors");
  save_safetensors(path, {{"state.0.momentum_buffer", buffer_w}, {"state.1.momentum_buffer", buffer_b}},
                   {{"param_groups",
                     "[{\"lr\": 0.1, \"momentum\": 0.9, \"dampening\": 0, \"weight_decay\": 0, \"nesterov\": false, "
                     "\"maximize\": false, \"foreach\": null, \"differentiable\": false, \"params\": [0, 1]}]"}});
  load(optimizer, path);
  EXPECT_EQ(optimizer.state(p.w).at("step").item<int64_t>(), 1);

  // The next step uses the buffer: buf = 0.9 * buf + g, w -= 0.1 * buf.
  const Tensor w0 = p.w.detach().clone();
  optimizer.zero_grad();
  p.w.sum().backward();
  optimizer.step();
  EXPECT_TRUE(allclose(p.w.detach(), w0 - (buffer_w * 0.9 + 1.0) * 0.1, 1e-6, 1e-6));
  fs::remove(path);
}

TEST(OptimSerialize, FilesItCannotHonourAreErrorsNamingFileAndKey) {
  manual_seed(7);
  Params p;
  Adam adam(p.list());
  const std::string path = temp_path("bad.safetensors");
  auto write_groups = [&](const std::string& groups, std::map<std::string, std::string> extra = {}) {
    extra["param_groups"] = groups;
    save_safetensors(path, {}, extra);
  };
  const std::string ok_tail = "\"params\": [0, 1]}]";

  write_groups("[{\"lr\": 0.1, " + ok_tail, {{"optimizer", "SGD"}});
  EXPECT_TRUE(throws_with([&] { load(adam, path); }, {"optim::load(Adam)", path, "holds the state of SGD"}));

  write_groups("[{\"maximize\": true, " + ok_tail);
  EXPECT_TRUE(throws_with([&] { load(adam, path); }, {path, "param_groups[0].maximize", "no maximize mode"}));

  write_groups("[{\"decoupled_weight_decay\": true, " + ok_tail);
  EXPECT_TRUE(throws_with([&] { load(adam, path); }, {"decoupled_weight_decay", "load it into AdamW"}));

  write_groups("[{\"momentum\": 0.9, " + ok_tail);
  EXPECT_TRUE(throws_with([&] { load(adam, path); }, {"param_groups[0].momentum", "not an option", "betas"}));

  write_groups("[{\"lr\": \"fast\", " + ok_tail);
  EXPECT_TRUE(throws_with([&] { load(adam, path); }, {"param_groups[0].lr", "must be a number"}));

  write_groups("[{\"lr\": 0.1}]");
  EXPECT_TRUE(throws_with([&] { load(adam, path); }, {"param_groups[0]", "no \"params\""}));

  write_groups("[{\"lr\": 0.1, \"params\": [0]}]");
  EXPECT_TRUE(throws_with([&] { load(adam, path); }, {path, "group 0", "1 parameters", "has 2"}));

  save_safetensors(path, {{"state.x.step", full({}, 1)}}, {{"param_groups", "[{" + ok_tail}});
  EXPECT_TRUE(throws_with([&] { load(adam, path); }, {"state.x.step", "no parameter index"}));

  save_safetensors(path, {});
  EXPECT_TRUE(throws_with([&] { load(adam, path); }, {"no \"param_groups\" metadata"}));

  // Nothing was changed by the failed loads.
  EXPECT_EQ(adam.param_groups()[0].lr(), 1e-3);
  fs::remove(path);
}

}  // namespace
}  // namespace ember::optim
