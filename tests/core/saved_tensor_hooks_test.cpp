// Saved-tensor hooks (ember/core/autograd/saved_tensor_hooks.h, function.cpp):
// pack replaces what SavedTensor keeps, unpack what backward reads; guards
// nest and restore; the packed object dies with its node.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "ember/core/autograd/saved_tensor_hooks.h"
#include "ember/ember.h"
#include "support/error_message.h"

namespace ember {
namespace {

using autograd::PackedTensor;
using autograd::SavedTensorHooks;
using autograd::SavedTensorHooksGuard;
using testing::throws_with;
using V = std::vector<double>;

// Keeps the tensor, counts packs and unpacks, and multiplies what it gives
// back by `factor` (so a test can see that backward used unpack).
class Recording final : public SavedTensorHooks {
 public:
  struct Packed final : PackedTensor {
    Tensor t;
    Recording* owner;
    Tensor unpack() override {
      ++owner->unpacks;
      return owner->factor == 1.0 ? t : t * owner->factor;
    }
  };
  std::shared_ptr<PackedTensor> pack(const Tensor& t) override {
    ++packs;
    packed_had_history.push_back(t.grad_fn() != nullptr);
    auto p = std::make_shared<Packed>();
    p->t = t;
    p->owner = this;
    last = p;
    return p;
  }
  int packs = 0, unpacks = 0;
  double factor = 1.0;
  std::vector<bool> packed_had_history;
  std::weak_ptr<Packed> last;
};

TEST(SavedTensorHooks, PackOnSaveAndUnpackInBackward) {
  Tensor x = from_vector<double>({1, 2, 3}).set_requires_grad();
  Tensor y = from_vector<double>({4, 5, 6}).set_requires_grad();
  Recording hooks;
  Tensor loss;
  {
    SavedTensorHooksGuard guard(&hooks);
    loss = (x * y).sum();  // mul saves x and y
  }
  EXPECT_EQ(hooks.packs, 2);
  EXPECT_EQ(hooks.unpacks, 0);
  loss.backward();
  EXPECT_EQ(hooks.unpacks, 2);
  EXPECT_EQ(to_vector<double>(x.grad()), (V{4, 5, 6}));
  EXPECT_EQ(to_vector<double>(y.grad()), (V{1, 2, 3}));
}

TEST(SavedTensorHooks, BackwardUsesWhatUnpackReturns) {
  Tensor x = from_vector<double>({1, 2}).set_requires_grad();
  Recording hooks;
  hooks.factor = 10.0;
  Tensor loss;
  {
    SavedTensorHooksGuard guard(&hooks);
    loss = square(x).sum();  // d/dx = 2 x, x read back as 10 x
  }
  loss.backward();
  EXPECT_EQ(to_vector<double>(x.grad()), (V{20, 40}));
}

TEST(SavedTensorHooks, AnOutputArrivesDetached) {
  Tensor x = from_vector<double>({0.5, 1.0}).set_requires_grad();
  Recording hooks;
  Tensor y;
  {
    SavedTensorHooksGuard guard(&hooks);
    y = exp(x);  // saves its output
  }
  ASSERT_EQ(hooks.packs, 1);
  EXPECT_FALSE(hooks.packed_had_history[0]);
  y.sum().backward();
  EXPECT_TRUE(allclose(x.grad(), exp(x.detach())));
}

TEST(SavedTensorHooks, GuardsNestAndRestore) {
  Tensor x = from_vector<double>({1, 2}).set_requires_grad();
  Recording outer, inner;
  {
    SavedTensorHooksGuard a(&outer);
    EXPECT_EQ(autograd::current_saved_tensor_hooks(), &outer);
    Tensor y1 = square(x);
    {
      SavedTensorHooksGuard b(&inner);
      Tensor y2 = square(x);
      {
        SavedTensorHooksGuard off(nullptr);  // disables the hooks around it
        Tensor y3 = square(x);
      }
      EXPECT_EQ(autograd::current_saved_tensor_hooks(), &inner);
    }
    Tensor y4 = square(x);
    EXPECT_EQ(autograd::current_saved_tensor_hooks(), &outer);
  }
  EXPECT_EQ(autograd::current_saved_tensor_hooks(), nullptr);
  EXPECT_EQ(outer.packs, 2);
  EXPECT_EQ(inner.packs, 1);
}

TEST(SavedTensorHooks, ThePackedObjectDiesWithItsNode) {
  Tensor x = from_vector<double>({1, 2}).set_requires_grad();
  Recording hooks;
  Tensor loss;
  {
    SavedTensorHooksGuard guard(&hooks);
    loss = square(x).sum();
  }
  ASSERT_FALSE(hooks.last.expired());
  loss.backward();  // frees the saved tensors
  EXPECT_TRUE(hooks.last.expired());
}

TEST(SavedTensorHooks, NoHooksKeepsTheInPlaceCheck) {
  Tensor x = from_vector<double>({1, 2}).set_requires_grad();
  Tensor h = x * 1.0;
  Tensor loss = square(h).sum();
  h.mul_(2.0);
  EXPECT_TRUE(throws_with([&] { loss.backward(); }, {"modified by an in-place operation"}));
}

TEST(SavedTensorHooks, APackThatReturnsNothingIsAnError) {
  struct Null final : SavedTensorHooks {
    std::shared_ptr<PackedTensor> pack(const Tensor&) override { return nullptr; }
  } hooks;
  Tensor x = from_vector<double>({1, 2}).set_requires_grad();
  SavedTensorHooksGuard guard(&hooks);
  EXPECT_TRUE(throws_with([&] { square(x); }, {"pack hook returned nothing", "[2]"}));
}

TEST(SavedTensorHooks, NoPackWithoutGrad) {
  Tensor x = from_vector<double>({1, 2});  // requires no grad: nothing is saved
  Recording hooks;
  SavedTensorHooksGuard guard(&hooks);
  square(x);
  {
    Tensor w = from_vector<double>({1, 2}).set_requires_grad();
    NoGradGuard no_grad;
    square(w);
  }
  EXPECT_EQ(hooks.packs, 0);
}

}  // namespace
}  // namespace ember
