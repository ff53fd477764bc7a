// Training checkpoints: 3 steps + save + load + 3 steps equals 6 steps,
// bit for bit; files that are not checkpoints are clear errors.
#include "ember/optim/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "ember/ember.h"
#include "ember/nn/safetensors.h"
#include "ember/optim/adam.h"
#include "ember/optim/clip_grad.h"
#include "support/error_message.h"

namespace ember {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using ::testing::HasSubstr;

struct TrainingRun {
  Tensor w = (arange(0, 6, 1, DType::Float32) * 0.3 - 0.7).reshape({2, 3}).set_requires_grad();
  Tensor b = full({3}, 0.25).set_requires_grad();
  optim::AdamW opt{std::vector<optim::ParamGroup>{optim::ParamGroup({w}), optim::ParamGroup({b}, {{"lr", 0.02}})},
                   optim::AdamWOptions{.lr = 0.01, .amsgrad = true}};
  optim::OneCycleLR sched{opt, std::vector<double>{0.05, 0.1}, 12};

  void steps(int from, int count) {
    for (int s = from; s < from + count; ++s) {
      opt.zero_grad();
      Tensor target = sin(arange(0, 6, 1, DType::Float32) + double(s)).reshape({2, 3});
      (square(w - target).sum() + (b * b * double(s + 1)).sum()).backward();
      optim::clip_grad_norm_({w, b}, 1.0);
      opt.step();
      sched.step();
    }
  }
};

std::string temp_path(const char* name) {
  return (fs::temp_directory_path() / ("ember_ckpt_" + std::to_string(::getpid()) + "_" + name)).string();
}

TEST(Checkpoint, ResumesARunExactly) {
  TrainingRun straight;
  straight.steps(0, 6);

  const std::string path = temp_path("resume.safetensors");
  {
    TrainingRun first;
    first.steps(0, 3);
    Checkpoint c;
    c.model = {{"w", first.w}, {"b", first.b}};
    c.optimizer = first.opt.state_dict();
    c.scheduler = first.sched.state_dict();
    c.counters = {{"global_step", 3}, {"epoch", -1}};
    c.metadata = {{"run", "test"}};
    save_checkpoint(path, c);
  }
  TrainingRun resumed;  // fresh parameters, optimizer and scheduler
  Checkpoint c = load_checkpoint(path);
  fs::remove(path);
  {
    NoGradGuard no_grad;
    resumed.w.copy_(c.model.at("w"));
    resumed.b.copy_(c.model.at("b"));
  }
  resumed.opt.load_state_dict(c.optimizer);
  ASSERT_TRUE(c.scheduler.has_value());
  resumed.sched.load_state_dict(*c.scheduler);
  EXPECT_EQ(c.counters, (std::map<std::string, int64_t>{{"epoch", -1}, {"global_step", 3}}));
  EXPECT_EQ(c.metadata, (std::map<std::string, std::string>{{"run", "test"}}));
  EXPECT_EQ(c.optimizer.state.at(0).at("step").dtype(), DType::Int64);
  resumed.steps(3, 3);

  EXPECT_TRUE(equal(resumed.w, straight.w)) << resumed.w << "\nvs\n" << straight.w;
  EXPECT_TRUE(equal(resumed.b, straight.b));
  EXPECT_EQ(resumed.sched.get_last_lr(), straight.sched.get_last_lr());
  for (size_t g = 0; g < 2; ++g) {
    EXPECT_EQ(resumed.opt.param_groups()[g].options, straight.opt.param_groups()[g].options) << "group " << g;
  }
  for (const char* name : {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"}) {
    EXPECT_TRUE(equal(resumed.opt.state(resumed.w).at(name), straight.opt.state(straight.w).at(name))) << name;
  }
}

TEST(Checkpoint, FilesThatAreNotCheckpointsAreClearErrors) {
  const std::string path = temp_path("plain.safetensors");
  save_safetensors(path, {{"weight", ones({2})}});
  EXPECT_THAT(error_of([&] { load_checkpoint(path); }),
              HasSubstr("load_checkpoint: " + path + ": not an ember checkpoint (no \"ember.checkpoint\" metadata)"));
  save_safetensors(path, {{"weight", ones({2})}}, {{"ember.checkpoint", "1"}, {"optim.groups", "0"}});
  EXPECT_THAT(error_of([&] { load_checkpoint(path); }),
              HasSubstr("unknown tensor \"weight\" (not written by save_checkpoint)"));
  save_safetensors(path, {}, {{"ember.checkpoint", "1"}, {"optim.groups", "1"}, {"optim.group.0.params", "0,x"}});
  EXPECT_THAT(error_of([&] { load_checkpoint(path); }),
              HasSubstr("\"optim.group.0.params\" holds \"x\", not a number"));
  save_safetensors(path, {}, {{"ember.checkpoint", "1"}, {"optim.groups", "1"}});
  EXPECT_THAT(error_of([&] { load_checkpoint(path); }), HasSubstr("no \"optim.group.0.params\""));
  save_safetensors(path, {}, {{"ember.checkpoint", "2"}});
  EXPECT_THAT(error_of([&] { load_checkpoint(path); }), HasSubstr("checkpoint layout version \"2\" is not supported"));
  fs::remove(path);
}

}  // namespace
}  // namespace ember
