// Printing (Tensor::str and operator<<, ember/core/tensor.cpp): dtype, device,
// shape and values in row-major order, autograd state, and summaries of
// large tensors.
#include <gtest/gtest.h>

#include <sstream>

#include "ember/ember.h"

namespace ember {
namespace {

size_t count(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
  return n;
}

TEST(Printing, SmallTensorsShowValuesDtypeDeviceAndShape) {
  Tensor m = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(m.str(), "tensor([[1, 2, 3],\n        [4, 5, 6]], dtype=float32, device=cpu, shape=[2, 3])");
  EXPECT_EQ(m.t().str(), "tensor([[1, 4],\n        [2, 5],\n        [3, 6]], dtype=float32, device=cpu, shape=[3, 2])");
  EXPECT_EQ(from_vector<double>({0.5, -1.25, 1e-8}).str(),
            "tensor([0.5, -1.25, 1e-08], dtype=float64, device=cpu, shape=[3])");
  EXPECT_EQ(from_vector<int64_t>({-3, (int64_t(1) << 60) + 1}).str(),  // exact beyond 2^53
            "tensor([-3, 1152921504606846977], dtype=int64, device=cpu, shape=[2])");
  EXPECT_EQ(from_vector<bool>({true, false}).str(), "tensor([true, false], dtype=bool, device=cpu, shape=[2])");
  EXPECT_EQ(full({}, 3.5).str(), "tensor(3.5, dtype=float32, device=cpu, shape=[])");
  EXPECT_EQ(from_vector<float>({0.1f}).to(DType::Float16).str(),
            "tensor([0.0999756], dtype=float16, device=cpu, shape=[1])");
  EXPECT_EQ(zeros({0}).str(), "tensor([], dtype=float32, device=cpu, shape=[0])");
  EXPECT_EQ(Tensor().str(), "tensor(undefined)");
  std::ostringstream os;
  os << m;
  EXPECT_EQ(os.str(), m.str());
}

TEST(Printing, ThreeDimsNestBrackets) {
  Tensor t = arange(0, 8, 1, DType::Int32).view({2, 2, 2});
  EXPECT_EQ(t.str(),
            "tensor([[[0, 1],\n"
            "         [2, 3]],\n"
            "        [[4, 5],\n"
            "         [6, 7]]], dtype=int32, device=cpu, shape=[2, 2, 2])");
}

TEST(Printing, AutogradStateIsShown) {
  Tensor x = from_vector<float>({1, 2}).set_requires_grad();
  EXPECT_EQ(x.str(), "tensor([1, 2], dtype=float32, device=cpu, shape=[2], requires_grad=true)");
  Tensor y = x * 2.0f;
  EXPECT_EQ(y.str(), "tensor([2, 4], dtype=float32, device=cpu, shape=[2], requires_grad=true, grad_fn=MulBackward)");
  EXPECT_EQ(y.detach().str(), "tensor([2, 4], dtype=float32, device=cpu, shape=[2])");
}

TEST(Printing, LargeTensorsAreSummarized) {
  Tensor v = arange(0, 2000, 1, DType::Float32);
  EXPECT_EQ(v.str(), "tensor([0, 1, 2, ..., 1997, 1998, 1999], dtype=float32, device=cpu, shape=[2000])");
  Tensor m = arange(0, 10000, 1, DType::Int64).view({100, 100});
  std::string s = m.str();
  EXPECT_EQ(s.substr(0, 36), "tensor([[0, 1, 2, ..., 97, 98, 99],\n");
  EXPECT_NE(s.find("[9900, 9901, 9902, ..., 9997, 9998, 9999]]"), std::string::npos) << s;
  EXPECT_EQ(count(s, "\n"), 6u) << s;  // 7 lines: 3 rows, "...", 3 rows
  EXPECT_NE(s.find("        ...,\n        [9700,"), std::string::npos) << s;
  EXPECT_EQ(s.find("[300,"), std::string::npos) << s;  // row 3 is elided
  EXPECT_NE(s.find("shape=[100, 100]"), std::string::npos);
  EXPECT_LT(s.size(), 400u);
  // At or below 1000 elements everything prints.
  std::string small = arange(0, 1000, 1, DType::Int64).str();
  EXPECT_EQ(small.find("..."), std::string::npos);
  EXPECT_NE(small.find(", 500, "), std::string::npos);
}

}  // namespace
}  // namespace ember
