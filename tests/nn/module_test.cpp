// nn::Module: registration and names, tree walks, train/eval, to(),
// zero_grad, clone, state dicts and printing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ember/ember.h"
#include "support/error_message.h"

namespace ember {
namespace {

using testing::error_of;

using ::testing::HasSubstr;

// A user-defined module: a child, an own parameter and an integer buffer.
class Block : public nn::UnaryModule {
 public:
  explicit Block(int64_t d) : d(d) {
    fc = register_module("fc", std::make_shared<nn::Linear>(d, d));
    scale = register_parameter("scale", ones({d}));
    steps = register_buffer("steps", zeros({}, DType::Int64));
  }
  Tensor forward(const Tensor& x) override { return fc->forward(x) * scale; }
  std::shared_ptr<nn::Module> clone() const override { return clone_as<Block>(d); }

  const int64_t d;
  std::shared_ptr<nn::Linear> fc;
  Tensor scale;
  Tensor steps;
};

std::shared_ptr<nn::Sequential> mlp() {
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Linear>(3, 2));
}

TEST(NnModule, SequentialParameterNamesAndCounts) {
  auto seq = mlp();
  EXPECT_EQ(seq->named_parameters().keys(), (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  TensorList params = seq->parameters();
  ASSERT_EQ(params.size(), 4u);
  int64_t total = 0;
  for (const Tensor& p : params) {
    total += p.numel();
    EXPECT_TRUE(p.requires_grad() && p.is_leaf());
  }
  EXPECT_EQ(total, 4 * 3 + 3 + 3 * 2 + 2);
  EXPECT_EQ(seq->named_parameters().at("2.weight").shape(), (Shape{2, 3}));
  EXPECT_TRUE(seq->named_parameters().at("0.weight").is_same(seq->at<nn::Linear>(0)->weight));
  EXPECT_TRUE(seq->parameters(false).empty());
  EXPECT_EQ(seq->named_children().keys(), (std::vector<std::string>{"0", "1", "2"}));
}

TEST(NnModule, OwnMembersComeBeforeChildrenAndNestedNamesAreDotted) {
  auto block = std::make_shared<Block>(3);
  EXPECT_EQ(block->named_parameters().keys(), (std::vector<std::string>{"scale", "fc.weight", "fc.bias"}));
  EXPECT_EQ(block->named_buffers().keys(), (std::vector<std::string>{"steps"}));
  EXPECT_EQ(block->state_dict().keys(), (std::vector<std::string>{"scale", "steps", "fc.weight", "fc.bias"}));

  auto outer = std::make_shared<nn::Sequential>(mlp(), std::make_shared<nn::Tanh>());
  outer->push_back("head", std::make_shared<nn::Linear>(2, 1));
  EXPECT_EQ(outer->named_parameters().keys(),
            (std::vector<std::string>{"0.0.weight", "0.0.bias", "0.2.weight", "0.2.bias", "head.weight", "head.bias"}));
  EXPECT_EQ(outer->named_modules().keys(), (std::vector<std::string>{"", "0", "0.0", "0.1", "0.2", "1", "head"}));
  EXPECT_EQ(outer->modules().size(), 7u);
  EXPECT_EQ(outer->modules()[0].get(), outer.get());
}

TEST(NnModule, TiedAndSharedMembersAreListedOnceButStateDictKeepsEveryName) {
  auto emb = std::make_shared<nn::Embedding>(5, 3);
  auto head = std::make_shared<nn::Linear>(3, 5, false);
  auto model = std::make_shared<nn::ModuleList>();
  model->push_back(emb);
  model->push_back(head);
  model->push_back(emb);  // the same child twice
  EXPECT_EQ(model->parameters().size(), 2u);
  EXPECT_EQ(model->modules().size(), 3u);
  EXPECT_EQ(model->state_dict().keys(), (std::vector<std::string>{"0.weight", "1.weight", "2.weight"}));

  // Weight tying: head's weight is the embedding's table.
  class Tied : public nn::Module {
   public:
    Tied() {
      emb = register_module("emb", std::make_shared<nn::Embedding>(5, 3));
      bias = register_parameter("head_weight", emb->weight);
    }
    std::shared_ptr<nn::Module> clone() const override { return clone_as<Tied>(); }
    std::shared_ptr<nn::Embedding> emb;
    Tensor bias;
  };
  auto tied = std::make_shared<Tied>();
  EXPECT_EQ(tied->named_parameters().keys(), (std::vector<std::string>{"head_weight"}));
  EXPECT_EQ(tied->state_dict().size(), 2u);
  tied->to(DType::Float64);
  EXPECT_TRUE(tied->bias.is_same(tied->emb->weight));
  EXPECT_EQ(tied->emb->weight.dtype(), DType::Float64);
  auto copy = nn::clone(tied);
  EXPECT_TRUE(copy->bias.is_same(copy->emb->weight));
  EXPECT_FALSE(copy->bias.is_same(tied->bias));
}

TEST(NnModule, RegistrationErrorsNameTheProblem) {
  class Bad : public nn::Module {
   public:
    std::shared_ptr<nn::Module> clone() const override { return clone_as<Bad>(); }
  };
  auto m = std::make_shared<Bad>();
  m->register_parameter("w", zeros({2}));
  EXPECT_THAT(error_of([&] { m->register_buffer("w", zeros({2})); }), HasSubstr("already has a parameter named 'w'"));
  EXPECT_THAT(error_of([&] { m->register_parameter("a.b", zeros({2})); }), HasSubstr("contains '.'"));
  EXPECT_THAT(error_of([&] { m->register_parameter("", zeros({2})); }), HasSubstr("empty name"));
  Tensor leaf = zeros({2}).set_requires_grad();
  EXPECT_THAT(error_of([&] { m->register_parameter("made", leaf * 2.0); }),
              HasSubstr("is not a leaf (it was made by MulBackward"));
  EXPECT_THAT(error_of([&] { m->register_parameter("ints", zeros({2}, DType::Int64)); }),
              HasSubstr("only floating tensors can require grad"));
  EXPECT_THAT(error_of([&] { m->register_parameter("none", Tensor()); }), HasSubstr("'none' of Bad is undefined"));
  auto child = std::make_shared<nn::Sequential>();
  m->register_module("child", child);
  EXPECT_THAT(error_of([&] { child->push_back("up", std::static_pointer_cast<nn::UnaryModule>(child)); }),
              HasSubstr("cycle"));
  m->register_parameter("frozen", zeros({2}, DType::Int64), false);
  EXPECT_FALSE(m->named_parameters().at("frozen").requires_grad());
}

TEST(NnModule, TrainAndEvalReachTheWholeTree) {
  auto seq = std::make_shared<nn::Sequential>(mlp(), std::make_shared<nn::Dropout>(0.5));
  for (const auto& m : seq->modules()) EXPECT_TRUE(m->is_training());
  seq->eval();
  for (const auto& m : seq->modules()) EXPECT_FALSE(m->is_training()) << m->name();
  Tensor x = randn({8, 4});
  EXPECT_TRUE(equal((*seq)(x), (*seq)(x)));  // dropout is the identity in eval
  seq->train();
  for (const auto& m : seq->modules()) EXPECT_TRUE(m->is_training());
}

TEST(NnModule, ToDtypeConvertsFloatingTensorsInPlaceAndKeepsHandles) {
  auto block = std::make_shared<Block>(3);
  TensorList before = block->parameters();  // e.g. an optimizer's list, made before to()
  Tensor x = randn({2, 3});
  block->forward(x).sum().backward();
  ASSERT_TRUE(block->fc->weight.grad().defined());
  std::vector<float> w32 = to_vector<float>(block->fc->weight);

  block->to(DType::Float64);
  for (const auto& item : block->named_parameters()) EXPECT_EQ(item.value.dtype(), DType::Float64) << item.key;
  EXPECT_EQ(block->steps.dtype(), DType::Int64);         // integral buffers keep their dtype
  EXPECT_EQ(block->fc->weight.dtype(), DType::Float64);  // the member sees the conversion
  EXPECT_TRUE(before[1].is_same(block->fc->weight));
  EXPECT_EQ(before[1].dtype(), DType::Float64);
  EXPECT_EQ(block->fc->weight.grad().dtype(), DType::Float64);
  EXPECT_TRUE(block->fc->weight.requires_grad() && block->fc->weight.is_leaf());
  std::vector<double> w64 = to_vector<double>(block->fc->weight);
  for (size_t i = 0; i < w32.size(); ++i) EXPECT_EQ(w64[i], double(w32[i]));

  // Still trains: the gradient reaches the converted leaves.
  block->zero_grad();
  block->forward(x.to(DType::Float64)).sum().backward();
  EXPECT_EQ(block->fc->weight.grad().dtype(), DType::Float64);

  block->to(kCPU, DType::BFloat16);
  EXPECT_EQ(block->scale.dtype(), DType::BFloat16);
  EXPECT_THAT(error_of([&] { block->to(DType::Int32); }), HasSubstr("needs a floating dtype"));
}

TEST(NnModule, ZeroGradDropsOrZeroesInPlace) {
  auto seq = mlp();
  (*seq)(randn({5, 4})).sum().backward();
  Tensor g = seq->at<nn::Linear>(0)->weight.grad();
  ASSERT_TRUE(g.defined());
  seq->zero_grad(false);
  Tensor g2 = seq->at<nn::Linear>(0)->weight.grad();
  EXPECT_EQ(g2.data_ptr(), g.data_ptr());
  EXPECT_EQ(to_vector<float>(g2), std::vector<float>(12, 0.0f));
  seq->zero_grad();
  for (const Tensor& p : seq->parameters()) EXPECT_FALSE(p.grad().defined());
}

TEST(NnModule, CloneIsADeepCopyWithEqualValuesAndOutputs) {
  auto seq = std::make_shared<nn::Sequential>(std::make_shared<Block>(4), std::make_shared<nn::Linear>(4, 2));
  (*seq)(randn({3, 4})).sum().backward();
  seq->at<nn::Linear>(1)->eval();
  seq->at<nn::Linear>(1)->bias.set_requires_grad(false);

  auto copy = nn::clone(seq);

  auto original = seq->state_dict(), cloned = copy->state_dict();
  ASSERT_EQ(original.keys(), cloned.keys());
  for (const auto& item : original) {
    EXPECT_TRUE(equal(item.value, cloned.at(item.key))) << item.key;
    EXPECT_NE(item.value.data_ptr(), cloned.at(item.key).data_ptr()) << item.key;
  }
  auto named = copy->named_parameters();
  EXPECT_TRUE(named.at("0.fc.weight").requires_grad());
  EXPECT_FALSE(named.at("1.bias").requires_grad());
  EXPECT_FALSE(named.at("0.fc.weight").grad().defined());
  EXPECT_TRUE(copy->at<Block>(0)->fc->weight.is_same(named.at("0.fc.weight")));
  EXPECT_TRUE(copy->is_training());
  EXPECT_FALSE(copy->at<nn::Linear>(1)->is_training());

  Tensor x = randn({3, 4});
  EXPECT_TRUE(equal((*seq)(x), (*copy)(x)));
  {
    NoGradGuard no_grad;
    copy->at<Block>(0)->scale.add_(1.0);
  }
  EXPECT_EQ(to_vector<float>(seq->at<Block>(0)->scale), std::vector<float>(4, 1.0f));
}

TEST(NnModule, CloneDrawsNoRandomNumbers) {
  auto lin = std::make_shared<nn::Linear>(16, 16);
  manual_seed(11);
  Tensor without = rand({3});
  manual_seed(11);
  auto copy = nn::clone(lin);
  Tensor with = rand({3});
  EXPECT_TRUE(equal(without, with));
}

TEST(NnModule, CloneOfASubclassThatDoesNotOverrideCloneIsAnError) {
  class MyLinear : public nn::Linear {
   public:
    using nn::Linear::Linear;
  };
  auto m = std::make_shared<MyLinear>(2, 2);
  EXPECT_THAT(error_of([&] { nn::clone(m); }), HasSubstr("MyLinear must override clone()"));
}

TEST(NnModule, CloneThatRebuildsADifferentTreeIsAnError) {
  // A class whose clone() forgets an option that decides its parameters.
  class Shaky : public nn::Module {
   public:
    explicit Shaky(bool extra) {
      register_parameter("w", zeros({2}));
      if (extra) register_parameter("extra", zeros({2}));
    }
    std::shared_ptr<nn::Module> clone() const override { return clone_as<Shaky>(false); }
  };
  auto m = std::make_shared<Shaky>(true);
  EXPECT_THAT(
      error_of([&] { m->clone(); }),
      HasSubstr("the copy of Shaky has parameters and buffers [\"w\"] but the original has [\"w\", \"extra\"]"));
}

TEST(NnModule, ModulesNeedSharedOwnership) {
  nn::ReLU on_stack;
  EXPECT_THAT(error_of([&] { on_stack.modules(); }),
              HasSubstr("this ReLU is not owned by a std::shared_ptr; create modules with std::make_shared"));
}

TEST(NnModule, StateDictRoundTripGivesEqualOutputs) {
  auto a = std::make_shared<Block>(3), b = std::make_shared<Block>(3);
  {
    NoGradGuard no_grad;
    a->steps.fill_(7);
  }
  Tensor x = randn({2, 3});
  EXPECT_FALSE(equal(a->forward(x), b->forward(x)));
  auto state = a->state_dict();
  EXPECT_FALSE(state.at("fc.weight").requires_grad());
  nn::LoadStateDictResult r = b->load_state_dict(state);
  EXPECT_TRUE(r.missing_keys.empty() && r.unexpected_keys.empty());
  EXPECT_TRUE(equal(a->forward(x), b->forward(x)));
  EXPECT_EQ(b->steps.item<int64_t>(), 7);
  EXPECT_NE(a->fc->weight.data_ptr(), b->fc->weight.data_ptr());

  // A float64 checkpoint loads into a float32 module (values cast).
  auto state64 = nn::OrderedDict<Tensor>();
  for (const auto& item : state) {
    state64.insert(item.key, is_floating(item.value.dtype()) ? item.value.to(DType::Float64) : item.value);
  }
  auto c = std::make_shared<Block>(3);
  c->load_state_dict(state64);
  EXPECT_EQ(c->fc->weight.dtype(), DType::Float32);
  EXPECT_TRUE(equal(c->forward(x), a->forward(x)));
}

TEST(NnModule, LoadStateDictErrorsListKeysAndShapes) {
  auto m = mlp();
  auto state = m->state_dict();
  std::vector<float> before = to_vector<float>(m->at<nn::Linear>(0)->weight);

  nn::OrderedDict<Tensor> missing;
  for (const auto& item : state) {
    if (item.key != "0.bias" && item.key != "2.weight") missing.insert(item.key, item.value);
  }
  missing.insert("0.bais", zeros({3}));
  std::string e = error_of([&] { m->load_state_dict(missing); });
  EXPECT_THAT(e, HasSubstr("of Sequential"));
  EXPECT_THAT(e, HasSubstr("missing keys (in the module, not in the state dict): \"0.bias\", \"2.weight\""));
  EXPECT_THAT(e, HasSubstr("unexpected keys (in the state dict, not in the module): \"0.bais\""));

  nn::LoadStateDictResult r = m->load_state_dict(missing, false);
  EXPECT_EQ(r.missing_keys, (std::vector<std::string>{"0.bias", "2.weight"}));
  EXPECT_EQ(r.unexpected_keys, (std::vector<std::string>{"0.bais"}));

  nn::OrderedDict<Tensor> wrong = state;
  wrong.insert_or_assign("0.weight", zeros({3, 5}));
  wrong.insert_or_assign("2.bias", zeros({2}, DType::Int64));
  e = error_of([&] { m->load_state_dict(wrong, false); });
  EXPECT_THAT(e, HasSubstr("size mismatch for 0.weight: copying a tensor of shape [3, 5] from the state dict, the "
                           "shape in the current module is [3, 4]"));
  EXPECT_THAT(e, HasSubstr("dtype mismatch for 2.bias: the state dict has int64, the current module float32"));
  // Nothing was loaded by the failed calls.
  EXPECT_EQ(to_vector<float>(m->at<nn::Linear>(0)->weight), before);
}

TEST(NnModule, PrintsTheTreeLikePyTorch) {
  auto seq = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(784, 256), std::make_shared<nn::ReLU>(),
                                              std::make_shared<nn::Linear>(256, 10, false));
  EXPECT_EQ(seq->str(),
            "Sequential(\n"
            "  (0): Linear(in_features=784, out_features=256, bias=true)\n"
            "  (1): ReLU()\n"
            "  (2): Linear(in_features=256, out_features=10, bias=false)\n"
            ")");
  auto outer = std::make_shared<nn::Sequential>(seq, std::make_shared<Block>(2));
  std::ostringstream os;
  os << *outer;
  EXPECT_EQ(os.str(),
            "Sequential(\n"
            "  (0): Sequential(\n"
            "    (0): Linear(in_features=784, out_features=256, bias=true)\n"
            "    (1): ReLU()\n"
            "    (2): Linear(in_features=256, out_features=10, bias=false)\n"
            "  )\n"
            "  (1): Block(\n"
            "    scale=[2], steps=[]\n"
            "    (fc): Linear(in_features=2, out_features=2, bias=true)\n"
            "  )\n"
            ")");
}

}  // namespace
}  // namespace ember
