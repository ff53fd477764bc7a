// tensor_demo: fits a linear model y = x.w + b to noisy synthetic data with
// autograd and plain gradient descent, printing the loss as it falls to the
// noise floor (0.01). README.md shows this file; keep the two in sync. Exits
// non-zero if the fit fails, so CI runs it as a smoke test.
#include <cstdio>

#include <ember/ember.h>

int main() {
  using namespace ember;
  manual_seed(0);
  Tensor x = randn({256, 3});  // inputs (N, 3)
  Tensor w_true = from_vector<float>({2.0f, -1.0f, 0.5f});
  Tensor y = (x * w_true).sum({1}) + 0.3f + randn({256}) * 0.1f;  // targets (N,)

  Tensor w = zeros({3}).set_requires_grad();  // parameters
  Tensor b = zeros({1}).set_requires_grad();
  float first = 0, last = 0;
  for (int step = 0; step <= 60; ++step) {
    Tensor loss = square((x * w).sum({1}) + b - y).sum() / 256.0f;
    loss.backward();  // fills w.grad(), b.grad()
    {
      NoGradGuard no_grad;  // the update is not recorded
      w.sub_(w.grad() * 0.05f);
      b.sub_(b.grad() * 0.05f);
    }
    w.grad().zero_();
    b.grad().zero_();
    last = loss.item<float>();
    if (step == 0) first = last;
    if (step % 10 == 0) std::printf("step %2d  loss %.5f\n", step, last);
  }
  std::printf("w = %s\nb = %s\n", w.str().c_str(), b.str().c_str());
  return last < 0.02f && last < first / 100 ? 0 : 1;
}
