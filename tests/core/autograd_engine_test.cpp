// The backward engine (ember/core/autograd/engine.cpp, function.cpp,
// accumulate_grad.cpp, node.cpp): accumulation, retain_graph, deep graphs,
// grad mode, autograd::grad, root errors, higher-order gradients and
// retain_grad.
#include <gtest/gtest.h>
#include <pthread.h>

#include <cmath>
#include <functional>
#include <thread>

#include "ember/ember.h"
#include "support/error_message.h"
#include "support/gradcheck.h"

namespace ember {
namespace {

using testing::gradcheck;
using testing::random_leaf;
using testing::throws_with;

using V = std::vector<double>;

TEST(AutogradEngine, GradientsAccumulateAcrossBackwardCalls) {
  Tensor x = from_vector<double>({1, -2, 3}).set_requires_grad();
  (x * x).sum().backward();
  EXPECT_EQ(to_vector<double>(x.grad()), (V{2, -4, 6}));
  auto storage = x.grad().storage();
  (x * x * 2.0).sum().backward();
  EXPECT_EQ(to_vector<double>(x.grad()), (V{6, -12, 18}));
  EXPECT_EQ(x.grad().storage(), storage);  // accumulated in place
  x.set_grad(Tensor());
  (x * 3.0).sum().backward();
  EXPECT_EQ(to_vector<double>(x.grad()), (V{3, 3, 3}));
  EXPECT_TRUE(throws_with([&] { x.set_grad(zeros({2}, DType::Float64)); }, {"set_grad", "[2]", "[3]"}));
  EXPECT_TRUE(throws_with([&] { x.set_grad(zeros({3})); }, {"set_grad", "float32", "float64"}));
}

TEST(AutogradEngine, LeafUsedManyTimesGetsTheSum) {
  Tensor x = from_vector<double>({2}).set_requires_grad();
  Tensor y = x * x * x + x.exp() * 2.0 - x;  // 3x^2 + 2e^x - 1
  y.backward();
  EXPECT_NEAR(to_vector<double>(x.grad())[0], 12 + 2 * std::exp(2.0) - 1, 1e-12);
}

TEST(AutogradEngine, StoredGradientNeverAliasesTheCallersTensor) {
  Tensor x = zeros({3}, DType::Float64).set_requires_grad();
  Tensor g = from_vector<double>({1, 2, 3});
  Tensor y = x + zeros({3}, DType::Float64);  // AddBackward passes g through unchanged
  y.backward(g);
  g.fill_(100);
  EXPECT_EQ(to_vector<double>(x.grad()), (V{1, 2, 3}));
  Tensor y2 = x + zeros({3}, DType::Float64);
  y2.backward(from_vector<double>({1, 1, 1}));
  EXPECT_EQ(to_vector<double>(g), (V{100, 100, 100}));  // accumulation did not write into g
  EXPECT_EQ(to_vector<double>(x.grad()), (V{2, 3, 4}));
  // An expanded gradient (SumBackward's) is stored densely.
  Tensor z = zeros({2, 2}, DType::Float64).set_requires_grad();
  z.sum().backward();
  EXPECT_TRUE(z.grad().is_contiguous());
  z.sum().backward();
  EXPECT_EQ(to_vector<double>(z.grad()), (V{2, 2, 2, 2}));
}

TEST(AutogradEngine, GradientsTakeTheirInputsDtype) {
  Tensor a = from_vector<float>({1, 2}).set_requires_grad();
  Tensor b = from_vector<double>({3, 4}).set_requires_grad();
  Tensor h = from_vector<float>({0.5f, 0.25f}).to(DType::Float16).detach().set_requires_grad();
  (a * b + h).sum().backward();
  EXPECT_EQ(a.grad().dtype(), DType::Float32);
  EXPECT_EQ(b.grad().dtype(), DType::Float64);
  EXPECT_EQ(h.grad().dtype(), DType::Float16);
  EXPECT_EQ(to_vector<double>(a.grad()), (V{3, 4}));
  EXPECT_EQ(to_vector<double>(b.grad()), (V{1, 2}));
  EXPECT_EQ(to_vector<double>(h.grad()), (V{1, 1}));
  // to(dtype) is differentiable back to the source dtype.
  Tensor c = from_vector<float>({1, 2}).set_requires_grad();
  (c.to(DType::Float64) * 3.0).sum().backward();
  EXPECT_EQ(c.grad().dtype(), DType::Float32);
  EXPECT_EQ(to_vector<double>(c.grad()), (V{3, 3}));
}

TEST(AutogradEngine, RetainGraphAllowsASecondBackward) {
  Tensor x = from_vector<double>({1, 2}).set_requires_grad();
  Tensor y = (x * x).sum();
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  EXPECT_EQ(to_vector<double>(x.grad()), (V{4, 8}));
  EXPECT_TRUE(throws_with([&] { y.backward(); }, {"second time", "retain_graph=true"}));

  Tensor z = (x * x).sum();
  z.backward();
  EXPECT_TRUE(throws_with([&] { z.backward(); }, {"Backward", "second time", "retain_graph=true"}));
  // Sharing a freed subgraph fails too; a fresh graph works.
  Tensor shared = x.exp();
  (shared * 2.0).sum().backward();
  EXPECT_TRUE(throws_with([&] { (shared * 3.0).sum().backward(); }, {"ExpBackward", "second time"}));
  x.set_grad(Tensor());
  (x.exp() * 3.0).sum().backward();
  EXPECT_NEAR(to_vector<double>(x.grad())[1], 3 * std::exp(2.0), 1e-12);
}

// Runs fn on a thread with a stack of `bytes`, so that a recursion as deep
// as a long graph fails here instead of passing on a big main-thread stack.
void run_with_stack(size_t bytes, std::function<void()> fn) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, bytes);
  pthread_t thread;
  auto body = [](void* p) -> void* {
    try {
      (*static_cast<std::function<void()>*>(p))();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "exception: " << e.what();
    }
    return nullptr;
  };
  ASSERT_EQ(pthread_create(&thread, &attr, body, &fn), 0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
}

TEST(AutogradEngine, TenThousandOpChainDoesNotOverflowTheStack) {
  // 10,000 nodes on a 256 KiB stack: backward and the graph's destruction
  // must both be iterative (a recursion takes hundreds of bytes per node).
  run_with_stack(256 << 10, [] {
    Tensor x = from_vector<double>({1.5}).set_requires_grad();
    {
      Tensor y = x;
      for (int i = 0; i < 10000; ++i) y = y * 1.0001;
      y.backward();
    }
    EXPECT_NEAR(to_vector<double>(x.grad())[0], std::pow(1.0001, 10000), 1e-9);
    // Nodes that also save their inputs, destroyed without a backward.
    Tensor y = x;
    for (int i = 0; i < 2000; ++i) y = (y * y).sqrt();
    EXPECT_NEAR(y.item<double>(), 1.5, 1e-9);
  });
}

TEST(AutogradEngine, GradModeGuardsNest) {
  EXPECT_TRUE(GradMode::is_enabled());
  Tensor x = ones({2}).set_requires_grad();
  {
    NoGradGuard a;
    EXPECT_FALSE(GradMode::is_enabled());
    EXPECT_FALSE((x * 2.0).requires_grad());
    {
      EnableGradGuard b;
      EXPECT_TRUE(GradMode::is_enabled());
      Tensor y = x * 2.0;
      EXPECT_TRUE(y.requires_grad());
      EXPECT_EQ(y.grad_fn()->name(), "MulBackward");
      {
        NoGradGuard c;
        EXPECT_FALSE(GradMode::is_enabled());
      }
      EXPECT_TRUE(GradMode::is_enabled());
    }
    EXPECT_FALSE(GradMode::is_enabled());
  }
  EXPECT_TRUE(GradMode::is_enabled());
  EXPECT_TRUE((x * 2.0).requires_grad());
}

TEST(AutogradEngine, GradModeGuardSetsEitherModeAndRestoresItOnAThrow) {
  for (bool outer : {false, true}) {
    GradModeGuard set_outer(outer);
    for (bool inner : {false, true}) {
      try {
        GradModeGuard set_inner(inner);
        EXPECT_EQ(GradMode::is_enabled(), inner);
        throw Error("leaves the scope");
      } catch (const Error&) {
      }
      EXPECT_EQ(GradMode::is_enabled(), outer);
    }
  }
  EXPECT_TRUE(GradMode::is_enabled());
}

TEST(AutogradEngine, GradModeIsThreadLocal) {
  NoGradGuard no_grad;
  bool thread_enabled = false, thread_records = false;
  std::thread t([&] {
    thread_enabled = GradMode::is_enabled();
    Tensor x = ones({2}).set_requires_grad();
    Tensor y = (x * 3.0).sum();
    thread_records = y.requires_grad();
    y.backward();
    EXPECT_EQ(to_vector<float>(x.grad()), (std::vector<float>{3, 3}));
    NoGradGuard inner;  // does not leak into the main thread
  });
  t.join();
  EXPECT_TRUE(thread_enabled);
  EXPECT_TRUE(thread_records);
  EXPECT_FALSE(GradMode::is_enabled());
}

TEST(AutogradEngine, BackwardRestoresGradModeAfterAnError) {
  Tensor x = ones({2}).set_requires_grad();
  x.register_hook([](const Tensor&) -> Tensor { throw Error("hook failed"); });
  EXPECT_THROW((x * 2.0).sum().backward(), Error);
  EXPECT_TRUE(GradMode::is_enabled());
  {
    NoGradGuard no_grad;
    Tensor y;
    {
      EnableGradGuard enable;
      y = (x * 2.0).sum();
    }
    EXPECT_THROW(y.backward(), Error);
    EXPECT_FALSE(GradMode::is_enabled());
  }
}

TEST(AutogradEngine, GradReturnsGradientsWithoutTouchingGrad) {
  Tensor a = from_vector<double>({1, 2}).set_requires_grad();
  Tensor b = from_vector<double>({3, 4}).set_requires_grad();
  Tensor h = a * b;          // a non-leaf input
  Tensor y = (h * a).sum();  // a^2 b
  TensorList g = autograd::grad({y}, {a, b, h}, {}, /*retain_graph=*/true);
  ASSERT_EQ(g.size(), 3u);
  EXPECT_EQ(to_vector<double>(g[0]), (V{6, 16}));  // 2ab
  EXPECT_EQ(to_vector<double>(g[1]), (V{1, 4}));   // a^2
  EXPECT_EQ(to_vector<double>(g[2]), (V{1, 2}));   // a
  EXPECT_FALSE(a.grad().defined());
  EXPECT_FALSE(b.grad().defined());
  // The graph survives (retain_graph) and a grad wrt h alone does not run h's node.
  TensorList gh = autograd::grad({y}, {h});
  EXPECT_EQ(to_vector<double>(gh[0]), (V{1, 2}));
  EXPECT_NO_THROW(h.sum().backward());
  EXPECT_EQ(to_vector<double>(a.grad()), (V{3, 4}));
}

TEST(AutogradEngine, GradAllowUnused) {
  Tensor a = from_vector<double>({1, 2}).set_requires_grad();
  Tensor unused = from_vector<double>({5, 6, 7}).set_requires_grad();
  Tensor y = (a * 2.0).sum();
  EXPECT_TRUE(throws_with(
      [&] {
        autograd::grad({y}, {a, unused}, {}, true);
      },
      {"input 1", "[3]", "not used", "allow_unused=true"}));
  TensorList g = autograd::grad({y}, {a, unused}, {}, false, false, /*allow_unused=*/true);
  EXPECT_EQ(to_vector<double>(g[0]), (V{2, 2}));
  EXPECT_FALSE(g[1].defined());
  Tensor plain = ones({2});
  Tensor y2 = (a * 2.0).sum();
  EXPECT_TRUE(throws_with([&] { autograd::grad({y2}, {plain}); }, {"input 0", "does not require grad"}));
}

TEST(AutogradEngine, BackwardRootErrors) {
  Tensor x = ones({2, 3}).set_requires_grad();
  Tensor y = x * 2.0;
  EXPECT_TRUE(throws_with([&] { y.backward(); }, {"one-element", "[2, 3]"}));
  EXPECT_TRUE(throws_with([&] { y.backward(ones({3, 2})); }, {"[3, 2]", "[2, 3]"}));
  EXPECT_TRUE(throws_with([&] { ones({2}).sum().backward(); }, {"does not require grad"}));
  EXPECT_TRUE(throws_with([&] { autograd::backward({y.sum(), y.sum()}, {ones({})}); }, {"1 gradients", "2 tensors"}));
  // A one-element root of any rank gets gradient 1.
  Tensor z = x.sum({0, 1}, true);  // shape [1, 1]
  z.backward();
  EXPECT_EQ(to_vector<float>(x.grad()), std::vector<float>(6, 1));
}

TEST(AutogradEngine, SeveralRootsAndALeafRoot) {
  Tensor x = from_vector<double>({1, 2}).set_requires_grad();
  Tensor y1 = x * 2.0, y2 = x * x;
  autograd::backward({y1, y2}, {from_vector<double>({1, 1}), from_vector<double>({10, 100})});
  EXPECT_EQ(to_vector<double>(x.grad()), (V{22, 402}));
  Tensor leaf = from_vector<double>({1, 1}).set_requires_grad();
  leaf.backward(from_vector<double>({4, 5}));
  EXPECT_EQ(to_vector<double>(leaf.grad()), (V{4, 5}));
}

TEST(AutogradEngine, CreateGraphGivesSecondDerivatives) {
  Tensor x = from_vector<double>({1, -2, 0.5}).set_requires_grad();
  // x^3 through pow, then through mul: d/dx = 3x^2, d2/dx2 = 6x.
  for (int form = 0; form < 2; ++form) {
    Tensor y = form == 0 ? x.pow(3).sum() : (x * x * x).sum();
    Tensor g = autograd::grad({y}, {x}, {}, false, /*create_graph=*/true)[0];
    EXPECT_TRUE(g.requires_grad());
    EXPECT_EQ(to_vector<double>(g), (V{3, 12, 0.75}));
    Tensor gg = autograd::grad({g.sum()}, {x})[0];
    EXPECT_EQ(to_vector<double>(gg), (V{6, -12, 3})) << "form " << form;
  }
  // backward(create_graph) leaves a differentiable x.grad().
  Tensor y = x.pow(3).sum();
  y.backward(Tensor(), false, /*create_graph=*/true);
  EXPECT_TRUE(x.grad().requires_grad());
  Tensor gg = autograd::grad({x.grad().sum()}, {x})[0];
  EXPECT_EQ(to_vector<double>(gg), (V{6, -12, 3}));
}

// Checks second derivatives: the map (x, v) -> d(sum(v * f(x)))/dx, built
// with create_graph, must itself pass gradcheck in x and v.
::testing::AssertionResult gradgradcheck(const std::function<Tensor(const TensorList&)>& f, const TensorList& xs) {
  Tensor probe = f(xs);
  Tensor v = random_leaf(probe.shape(), 99);
  TensorList inputs = xs;
  inputs.push_back(v);
  return gradcheck(
      [f, n = xs.size()](const TensorList& in) {
        TensorList x(in.begin(), in.begin() + long(n));
        TensorList g = autograd::grad({f(x)}, x, {in[n]}, false, /*create_graph=*/true, /*allow_unused=*/true);
        Tensor out = zeros({}, DType::Float64);
        for (const Tensor& gi : g) {
          if (gi.defined()) out = out + (gi * gi).sum();  // a scalar mixing every first derivative
        }
        return out;
      },
      inputs);
}

TEST(AutogradEngine, SecondDerivativesOfUnaryOps) {
  Tensor x = random_leaf({5}, 31);
  Tensor pos = (random_leaf({5}, 32).detach().abs() + 0.5).set_requires_grad();
  auto unary = [](Tensor (*op)(const Tensor&)) { return [op](const TensorList& in) { return op(in[0]); }; };
  EXPECT_TRUE(gradgradcheck(unary([](const Tensor& t) { return exp(t); }), {x})) << "exp";
  EXPECT_TRUE(gradgradcheck(unary([](const Tensor& t) { return log(t); }), {pos})) << "log";
  EXPECT_TRUE(gradgradcheck(unary([](const Tensor& t) { return sqrt(t); }), {pos})) << "sqrt";
  EXPECT_TRUE(gradgradcheck(unary([](const Tensor& t) { return rsqrt(t); }), {pos})) << "rsqrt";
  EXPECT_TRUE(gradgradcheck(unary([](const Tensor& t) { return tanh(t); }), {x})) << "tanh";
  EXPECT_TRUE(gradgradcheck(unary([](const Tensor& t) { return sigmoid(t); }), {x})) << "sigmoid";
  EXPECT_TRUE(gradgradcheck(unary([](const Tensor& t) { return gelu(t); }), {x})) << "gelu";
  EXPECT_TRUE(gradgradcheck(unary([](const Tensor& t) { return erf(t); }), {x})) << "erf";
  EXPECT_TRUE(gradgradcheck(unary([](const Tensor& t) { return relu(t); }), {x})) << "relu";
  EXPECT_TRUE(gradgradcheck(unary([](const Tensor& t) { return sin(t); }), {x})) << "sin";
  EXPECT_TRUE(gradgradcheck(unary([](const Tensor& t) { return cos(t); }), {x})) << "cos";
  EXPECT_TRUE(gradgradcheck(unary([](const Tensor& t) { return reciprocal(t); }), {pos})) << "reciprocal";
  EXPECT_TRUE(gradgradcheck(unary([](const Tensor& t) { return square(t); }), {x})) << "square";
  EXPECT_TRUE(gradgradcheck(unary([](const Tensor& t) { return abs(t); }), {x})) << "abs";
  EXPECT_TRUE(gradgradcheck(unary([](const Tensor& t) { return t.pow(2.5); }), {pos})) << "pow scalar";
}

TEST(AutogradEngine, SecondDerivativesOfBinaryOps) {
  Tensor a = random_leaf({2, 3}, 33);
  Tensor b = random_leaf({3}, 34);
  Tensor pa = (a.detach().abs() + 0.5).set_requires_grad();
  Tensor pb = (b.detach().abs() + 0.5).set_requires_grad();
  EXPECT_TRUE(gradgradcheck([](const TensorList& in) { return in[0] * in[1]; }, {a, b})) << "mul";
  EXPECT_TRUE(gradgradcheck([](const TensorList& in) { return in[0] / in[1]; }, {a, pb})) << "div";
  EXPECT_TRUE(gradgradcheck([](const TensorList& in) { return 2.0 / in[0]; }, {pa})) << "rdiv";
  EXPECT_TRUE(gradgradcheck([](const TensorList& in) { return pow(in[0], in[1]); }, {pa, b})) << "pow";
  EXPECT_TRUE(gradgradcheck([](const TensorList& in) { return maximum(in[0], in[1]) * in[0]; }, {a, b})) << "max";
  EXPECT_TRUE(gradgradcheck([](const TensorList& in) { return in[0].t().narrow(0, 1, 2) * in[1].sum(); }, {a, b}))
      << "views";
}

TEST(AutogradEngine, RetainGradOnANonLeaf) {
  Tensor x = from_vector<double>({1, 2}).set_requires_grad();
  Tensor y = x * 3.0;
  y.retain_grad();
  y.retain_grad();  // idempotent
  (y * y).sum().backward();
  EXPECT_EQ(to_vector<double>(y.grad()), (V{6, 12}));
  EXPECT_EQ(to_vector<double>(x.grad()), (V{18, 36}));
  Tensor z = x * 3.0;
  EXPECT_FALSE(z.grad().defined());  // not retained
  // Retained gradients accumulate over backward calls, as leaves do.
  Tensor w = x * 1.0;
  w.retain_grad();
  Tensor l = (w * 2.0).sum();
  l.backward(Tensor(), true);
  l.backward();
  EXPECT_EQ(to_vector<double>(w.grad()), (V{4, 4}));
  EXPECT_TRUE(throws_with([] { ones({1}).retain_grad(); }, {"retain_grad", "requires_grad=false"}));
}

// A root node with the inputs' gradients for the seed 1 at hand
// (Node::apply_to_unit_seed, GradScaler's scaled loss) gives them to a
// backward() without a gradient instead of running apply() on a seed of
// ones; with a gradient, a hook on the root, create_graph or a second
// root, apply() runs as usual.
class UnitSeeded final : public Node {
 public:
  UnitSeeded(Edge input, Tensor unit) : unit_(std::move(unit)) { next_edges_.push_back(std::move(input)); }
  std::string name() const override { return "UnitSeeded"; }
  TensorList apply(TensorList&& grads) override {
    ++applied;
    return {grads[0].defined() ? grads[0] * 3.0 : Tensor()};
  }
  std::optional<TensorList> apply_to_unit_seed() override { return TensorList{unit_}; }
  int applied = 0;

 private:
  Tensor unit_;
};

TEST(AutogradEngine, ARootNodeMayGiveItsGradientsForTheUnitSeed) {
  Tensor x = from_vector<double>({2.0}).reshape({}).set_requires_grad();
  const Tensor unit = from_vector<double>({7.0}).reshape({});  // not 3 = apply()'s for a seed of 1
  auto make_root = [&](std::shared_ptr<UnitSeeded>& node) {
    Tensor y = x.detach() * 3.0;
    node = std::make_shared<UnitSeeded>(autograd::gradient_edge(x), unit);
    autograd::set_history(y, node, 0);
    return y;
  };
  std::shared_ptr<UnitSeeded> node;
  make_root(node).backward();
  EXPECT_EQ(node->applied, 0);
  EXPECT_EQ(x.grad().item<double>(), 7.0);
  EXPECT_FALSE(x.grad().is_same(unit));  // accumulated as a copy: the node may share it
  EXPECT_EQ(unit.item<double>(), 7.0);

  x.set_grad(Tensor());
  make_root(node).backward(from_vector<double>({1.0}).reshape({}));
  EXPECT_EQ(node->applied, 1);
  EXPECT_EQ(x.grad().item<double>(), 3.0);

  x.set_grad(Tensor());
  Tensor hooked = make_root(node);
  hooked.retain_grad();
  hooked.backward();
  EXPECT_EQ(node->applied, 1);
  EXPECT_EQ(hooked.grad().item<double>(), 1.0);
  EXPECT_EQ(x.grad().item<double>(), 3.0);

  x.set_grad(Tensor());
  make_root(node).backward(Tensor(), /*retain_graph=*/false, /*create_graph=*/true);
  EXPECT_EQ(node->applied, 1);
  EXPECT_EQ(x.grad().item<double>(), 3.0);

  x.set_grad(Tensor());
  Tensor other = x * 1.0;
  autograd::backward({make_root(node), other}, {});
  EXPECT_EQ(node->applied, 1);
  EXPECT_EQ(x.grad().item<double>(), 4.0);
}

TEST(AutogradEngine, SetRequiresGradRules) {
  Tensor x = ones({2}).set_requires_grad();
  Tensor y = x * 2.0;
  EXPECT_TRUE(throws_with([&] { y.set_requires_grad(false); }, {"leaf", "MulBackward", "detach"}));
  EXPECT_TRUE(throws_with([] { ones({2}, DType::Int64).set_requires_grad(); }, {"floating", "int64"}));
  EXPECT_TRUE(x.is_leaf());
  EXPECT_FALSE(y.is_leaf());
  EXPECT_EQ(y.grad_fn()->next_edges().size(), 1u);
  EXPECT_EQ(y.grad_fn()->next_edges()[0].node->name(), "AccumulateGrad");
}

}  // namespace
}  // namespace ember
