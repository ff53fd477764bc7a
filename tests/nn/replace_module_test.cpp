// Module::replace_module (ember/nn/module.h) and the containers' versions
// (ember/nn/container.h): same name and position, forward uses the new child,
// errors for missing names, cycles and non-unary members of a Sequential.
#include <gtest/gtest.h>

#include "ember/ember.h"
#include "support/error_message.h"

namespace ember::nn {
namespace {

using testing::throws_with;

TEST(ReplaceModule, SequentialKeepsNameAndPositionAndForwardsThroughTheNewChild) {
  auto seq = std::make_shared<Sequential>(std::make_shared<Linear>(2, 3), std::make_shared<ReLU>(),
                                          std::make_shared<Linear>(3, 1));
  const std::vector<std::string> before = seq->named_parameters().keys();
  auto tanh = std::make_shared<Tanh>();
  seq->replace_module("1", tanh);
  EXPECT_EQ(seq->named_parameters().keys(), before);
  EXPECT_EQ((*seq)[1], tanh);
  EXPECT_EQ(seq->named_children().keys(), (std::vector<std::string>{"0", "1", "2"}));
  Tensor x = from_vector<float>({-1, 2}, {1, 2});
  Tensor h = seq->at<Linear>(0)->forward(x);
  Tensor want = seq->at<Linear>(2)->forward(h.tanh());
  EXPECT_EQ(to_vector<float>(seq->forward(x)), to_vector<float>(want));
  // A new layer with parameters shows up under the old name.
  seq->replace_module("1", std::make_shared<Linear>(3, 3));
  EXPECT_TRUE(seq->named_parameters().contains("1.weight"));
}

TEST(ReplaceModule, ModuleListAndPlainModules) {
  auto list = std::make_shared<ModuleList>(std::vector<std::shared_ptr<Module>>{std::make_shared<Linear>(2, 2)});
  auto other = std::make_shared<Linear>(4, 4);
  list->replace_module("0", other);
  EXPECT_EQ((*list)[0], other);
  EXPECT_EQ(list->named_children().at("0"), other);
}

TEST(ReplaceModule, Errors) {
  auto seq = std::make_shared<Sequential>(std::make_shared<Linear>(2, 3));
  EXPECT_TRUE(throws_with([&] { seq->replace_module("5", std::make_shared<ReLU>()); },
                          {"has no child module named '5'", "\"0\""}));
  EXPECT_TRUE(throws_with([&] { seq->replace_module("0", std::make_shared<ModuleList>()); }, {"not a UnaryModule"}));
  EXPECT_TRUE(throws_with([&] { seq->replace_module("0", nullptr); }, {"is null"}));
  auto outer = std::make_shared<Sequential>(seq);
  EXPECT_TRUE(throws_with([&] { seq->replace_module("0", outer); }, {"cycle"}));
}

}  // namespace
}  // namespace ember::nn
