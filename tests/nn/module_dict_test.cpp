// ModuleDict: insertion order, PyTorch's state_dict names and repr, the
// dict operations, PyTorch's key rules, clone; and Identity.
#include "ember/nn/module_dict.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ember/ember.h"
#include "support/error_message.h"

namespace ember {
namespace {

using testing::throws_with;
using Keys = std::vector<std::string>;

std::shared_ptr<nn::ModuleDict> two_layers() {
  return std::make_shared<nn::ModuleDict>(std::vector<nn::ModuleDict::Item>{{"lin", std::make_shared<nn::Linear>(2, 3)},
                                                                            {"act", std::make_shared<nn::ReLU>()}});
}

TEST(ModuleDict, KeepsInsertionOrderAndLooksUpByKey) {
  auto d = two_layers();
  d->insert("norm", std::make_shared<nn::LayerNorm>(Shape{3}));
  EXPECT_EQ(d->keys(), (Keys{"lin", "act", "norm"}));
  EXPECT_EQ(d->named_children().keys(), (Keys{"lin", "act", "norm"}));
  EXPECT_EQ(d->size(), 3u);
  EXPECT_FALSE(d->empty());
  EXPECT_TRUE(d->contains("act"));
  EXPECT_FALSE(d->contains("fc"));
  EXPECT_EQ(d->at<nn::Linear>("lin")->out_features, 3);
  EXPECT_EQ((*d)["act"]->name(), "ReLU");
  std::vector<std::shared_ptr<nn::Module>> values = d->values();
  ASSERT_EQ(values.size(), 3u);
  EXPECT_EQ(values[2].get(), (*d)["norm"].get());
  Keys iterated;
  for (const auto& item : *d) iterated.push_back(item.key);
  EXPECT_EQ(iterated, d->keys());
  auto items = d->items();
  EXPECT_EQ(items[1].first, "act");
  EXPECT_EQ(items[1].second.get(), (*d)["act"].get());
}

// torch: nn.ModuleDict([('lin', nn.Linear(2, 3)), ('act', nn.ReLU())]) inside
// a module as `blocks` gives blocks.lin.weight, blocks.lin.bias.
TEST(ModuleDict, StateDictNamesAreThoseOfPyTorch) {
  class Net : public nn::Module {
   public:
    Net() {
      blocks = register_module("blocks", two_layers());
      blocks->insert("out", std::make_shared<nn::Linear>(3, 1, false));
    }
    std::shared_ptr<nn::Module> clone() const override { return clone_as<Net>(); }
    std::shared_ptr<nn::ModuleDict> blocks;
  };
  auto net = std::make_shared<Net>();
  EXPECT_EQ(net->state_dict().keys(), (Keys{"blocks.lin.weight", "blocks.lin.bias", "blocks.out.weight"}));
  EXPECT_EQ(net->parameters().size(), 3u);
  EXPECT_EQ(net->named_modules().keys(), (Keys{"", "blocks", "blocks.lin", "blocks.act", "blocks.out"}));
  net->to(DType::Float64);
  EXPECT_EQ(net->blocks->at<nn::Linear>("lin")->weight.dtype(), DType::Float64);
}

TEST(ModuleDict, PrintsAsPyTorch) {
  EXPECT_EQ(two_layers()->str(),
            "ModuleDict(\n"
            "  (lin): Linear(in_features=2, out_features=3, bias=true)\n"
            "  (act): ReLU()\n"
            ")");
  EXPECT_EQ(nn::ModuleDict().str(), "ModuleDict()");
}

// As d['lin'] = ... in PyTorch: the key keeps its place.
TEST(ModuleDict, InsertOnAnExistingKeyReplacesInPlace) {
  auto d = two_layers();
  auto wider = std::make_shared<nn::Linear>(2, 4);
  d->insert("lin", wider);
  EXPECT_EQ(d->keys(), (Keys{"lin", "act"}));
  EXPECT_EQ((*d)["lin"].get(), wider.get());
  EXPECT_EQ(d->named_children().at("lin").get(), wider.get());
  EXPECT_EQ(d->state_dict().at("lin.weight").shape(), (Shape{4, 2}));
}

TEST(ModuleDict, UpdatePopAndClear) {
  auto d = two_layers();
  d->update({{"z", std::make_shared<nn::Tanh>()}, {"act", std::make_shared<nn::GELU>()}});
  EXPECT_EQ(d->keys(), (Keys{"lin", "act", "z"}));
  EXPECT_EQ((*d)["act"]->name(), "GELU");

  nn::ModuleDict other;
  other.insert("extra", std::make_shared<nn::Linear>(1, 1));
  d->update(other);
  EXPECT_EQ(d->keys(), (Keys{"lin", "act", "z", "extra"}));

  std::shared_ptr<nn::Module> lin = (*d)["lin"];
  EXPECT_EQ(d->pop("lin").get(), lin.get());
  EXPECT_EQ(d->keys(), (Keys{"act", "z", "extra"}));
  EXPECT_EQ(d->named_children().keys(), (Keys{"act", "z", "extra"}));
  EXPECT_EQ(d->state_dict().keys(), (Keys{"extra.weight", "extra.bias"}));
  d->insert("lin", lin);  // a popped key can come back, at the end
  EXPECT_EQ(d->keys(), (Keys{"act", "z", "extra", "lin"}));

  d->clear();
  EXPECT_TRUE(d->empty());
  EXPECT_TRUE(d->children().empty());
  EXPECT_TRUE(d->parameters().empty());
}

TEST(ModuleDict, CloneCopiesEveryModule) {
  auto d = two_layers();
  auto copy = nn::clone(d);
  EXPECT_EQ(copy->keys(), d->keys());
  auto a = d->at<nn::Linear>("lin"), b = copy->at<nn::Linear>("lin");
  EXPECT_NE(a.get(), b.get());
  EXPECT_FALSE(a->weight.is_same(b->weight));
  EXPECT_TRUE(equal(a->weight, b->weight));
}

TEST(ModuleDict, KeysPyTorchRefusesAreErrors) {
  nn::ModuleDict d;
  auto relu = std::make_shared<nn::ReLU>();
  EXPECT_TRUE(throws_with([&] { d.insert("", relu); }, {"ModuleDict", "empty string"}));
  EXPECT_TRUE(throws_with([&] { d.insert("a.b", relu); }, {"ModuleDict", "'a.b'", "contains '.'"}));
  for (const char* attribute : {"keys", "training", "forward", "update", "pop", "_modules", "state_dict"}) {
    EXPECT_TRUE(throws_with([&] { d.insert(attribute, relu); },
                            {"ModuleDict", std::string("'") + attribute + "'", "attribute", "already exists"}))
        << attribute;
  }
  EXPECT_TRUE(throws_with([&] { d.insert("x", nullptr); }, {"ModuleDict::insert", "'x'", "null"}));
  EXPECT_TRUE(d.empty());
  // What PyTorch accepts, ember accepts.
  d.insert("1a", relu);
  d.insert("a b", relu);
  d.insert("weight", relu);
  EXPECT_EQ(d.keys(), (Keys{"1a", "a b", "weight"}));
}

TEST(ModuleDict, MissingKeysAndWrongClassesAreErrors) {
  auto d = two_layers();
  EXPECT_TRUE(throws_with([&] { (*d)["fc"]; }, {"ModuleDict", "no key 'fc'", "'lin', 'act'"}));
  EXPECT_TRUE(throws_with([&] { d->pop("fc"); }, {"ModuleDict::pop", "no key 'fc'", "'lin', 'act'"}));
  EXPECT_TRUE(throws_with([&] { d->at<nn::Linear>("act"); }, {"ModuleDict::at", "'act'", "ReLU"}));
  EXPECT_EQ(d->keys(), (Keys{"lin", "act"}));
}

// torch.nn.Identity: the input itself comes back.
TEST(Identity, ReturnsItsInputAndPrintsAsPyTorch) {
  nn::Identity id;
  Tensor x = randn({2, 3}).set_requires_grad();
  Tensor y = id(x);
  EXPECT_TRUE(y.is_same(x));
  EXPECT_EQ(id.str(), "Identity()");
  EXPECT_TRUE(id.parameters().empty());
  auto seq = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(3, 2), std::make_shared<nn::Identity>());
  EXPECT_EQ(seq->str(),
            "Sequential(\n"
            "  (0): Linear(in_features=3, out_features=2, bias=true)\n"
            "  (1): Identity()\n"
            ")");
  seq->forward(x).sum().backward();
  EXPECT_TRUE(x.grad().defined());
  auto copy = nn::clone(std::make_shared<nn::Identity>());
  EXPECT_EQ(copy->name(), "Identity");
}

}  // namespace
}  // namespace ember
