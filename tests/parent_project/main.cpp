// Multiplies two matrices through an ember added with add_subdirectory and
// checks the product against the one computed here; exits non-zero on any
// mismatch.
#include <cstdio>
#include <vector>

#include <ember/ember.h>

int main() {
  const std::vector<float> a{1, 2, 3, 4, 5, 6};  // 2 x 3
  const std::vector<float> b{1, 0, 0, 1, 1, 1};  // 3 x 2
  const std::vector<float> want{4, 5, 10, 11};
  ember::Tensor c = ember::matmul(ember::from_vector<float>(a, {2, 3}), ember::from_vector<float>(b, {3, 2}));
  if (ember::to_vector<float>(c) != want) {
    std::fprintf(stderr, "parent: matmul gave %s, expected [[4, 5], [10, 11]]\n", c.str().c_str());
    return 1;
  }
  std::printf("parent: ember::matmul through add_subdirectory(ember) OK\n");
  return 0;
}
