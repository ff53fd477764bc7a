// Adds two tensors through the installed ember and checks every element
// against the sum computed here; exits non-zero on any mismatch.
#include <cstdio>
#include <vector>

#include <ember/ember.h>

int main() {
  std::vector<float> a{1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -0.5f};
  std::vector<float> b{0.5f, 4.0f, -1.25f, 2.0f, 1.0f, 0.5f};
  ember::Tensor sum = ember::from_vector<float>(a, {2, 3}) + ember::from_vector<float>(b, {2, 3});
  std::vector<float> got = ember::to_vector<float>(sum);
  if (sum.shape() != ember::Shape{2, 3} || got.size() != a.size()) {
    std::fprintf(stderr, "consumer: expected shape [2, 3], got %s\n", ember::shape_str(sum.shape()).c_str());
    return 1;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (got[i] != a[i] + b[i]) {
      std::fprintf(stderr, "consumer: element %zu is %g, expected %g\n", i, got[i], a[i] + b[i]);
      return 1;
    }
  }
  std::printf("consumer: ember::add through find_package(ember) OK: %s\n", sum.str().c_str());
  return 0;
}
