// nn::init: PyTorch's initializers written as a draw into a fresh tensor
// followed by one copy_ into the parameter.
#include "ember/nn/init.h"

#include <cmath>

#include "ember/core/grad_mode.h"
#include "ember/core/ops.h"

namespace ember::nn::init {
namespace {

thread_local int skip_depth = 0;

bool leave_alone(const Tensor& t) { return is_init_skipped() || t.numel() == 0; }

void check_floating(const char* op, const Tensor& t) {
  EMBER_CHECK(t.defined(), "nn::init::" << op << ": the tensor is undefined");
  EMBER_CHECK(is_floating(t.dtype()), "nn::init::" << op << ": expected a floating tensor, got "
                                                   << dtype_name(t.dtype()) << " of shape " << shape_str(t.shape()));
}

// The dtype random values are drawn in before the cast into t.
DType draw_dtype(const Tensor& t) { return t.dtype() == DType::Float64 ? DType::Float64 : DType::Float32; }

void write(Tensor& t, const Tensor& values) {
  NoGradGuard no_grad;
  t.copy_(values);
}

int64_t fan(const char* op, const Tensor& t, FanMode mode) {
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  int64_t f = mode == FanMode::FanIn ? fan_in : fan_out;
  EMBER_CHECK(f > 0, "nn::init::" << op << ": the " << (mode == FanMode::FanIn ? "fan_in" : "fan_out")
                                  << " of a tensor of shape " << shape_str(t.shape()) << " is 0");
  return f;
}

}  // namespace

SkipInitGuard::SkipInitGuard() { ++skip_depth; }
SkipInitGuard::~SkipInitGuard() { --skip_depth; }
bool is_init_skipped() { return skip_depth > 0; }

double calculate_gain(Nonlinearity nonlinearity, double param) {
  switch (nonlinearity) {
    case Nonlinearity::Linear:
    case Nonlinearity::Conv1d:
    case Nonlinearity::Conv2d:
    case Nonlinearity::Conv3d:
    case Nonlinearity::Sigmoid: return 1.0;
    case Nonlinearity::Tanh: return 5.0 / 3.0;
    case Nonlinearity::ReLU: return std::sqrt(2.0);
    case Nonlinearity::LeakyReLU: return std::sqrt(2.0 / (1.0 + param * param));
    case Nonlinearity::SELU: return 3.0 / 4.0;
  }
  EMBER_FAIL("nn::init::calculate_gain: unknown nonlinearity " << int(nonlinearity));
}

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t) {
  EMBER_CHECK(t.defined() && t.dim() >= 2,
              "nn::init: fan in and fan out can not be computed for a tensor with fewer than 2 dims (got shape "
                  << (t.defined() ? shape_str(t.shape()) : std::string("undefined")) << ")");
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

Tensor uniform_(Tensor t, double a, double b, Generator* gen) {
  check_floating("uniform_", t);
  EMBER_CHECK(a <= b, "nn::init::uniform_: the lower bound " << a << " exceeds the upper bound " << b);
  if (leave_alone(t)) return t;
  write(t, rand(t.shape(), draw_dtype(t), t.device(), gen) * (b - a) + a);
  return t;
}

Tensor normal_(Tensor t, double mean, double std, Generator* gen) {
  check_floating("normal_", t);
  EMBER_CHECK(std >= 0.0, "nn::init::normal_: std must be non-negative, got " << std);
  if (leave_alone(t)) return t;
  write(t, randn(t.shape(), draw_dtype(t), t.device(), gen) * std + mean);
  return t;
}

Tensor constant_(Tensor t, double value) {
  check_floating("constant_", t);
  if (leave_alone(t)) return t;
  NoGradGuard no_grad;
  t.fill_(value);
  return t;
}

Tensor zeros_(Tensor t) { return constant_(std::move(t), 0.0); }
Tensor ones_(Tensor t) { return constant_(std::move(t), 1.0); }

Tensor xavier_uniform_(Tensor t, double gain, Generator* gen) {
  check_floating("xavier_uniform_", t);
  if (leave_alone(t)) return t;
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  double bound = gain * std::sqrt(6.0 / double(fan_in + fan_out));
  return uniform_(std::move(t), -bound, bound, gen);
}

Tensor xavier_normal_(Tensor t, double gain, Generator* gen) {
  check_floating("xavier_normal_", t);
  if (leave_alone(t)) return t;
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  return normal_(std::move(t), 0.0, gain * std::sqrt(2.0 / double(fan_in + fan_out)), gen);
}

Tensor kaiming_uniform_(Tensor t, double a, FanMode mode, Nonlinearity nonlinearity, Generator* gen) {
  check_floating("kaiming_uniform_", t);
  if (leave_alone(t)) return t;
  double std = calculate_gain(nonlinearity, a) / std::sqrt(double(fan("kaiming_uniform_", t, mode)));
  double bound = std::sqrt(3.0) * std;
  return uniform_(std::move(t), -bound, bound, gen);
}

Tensor kaiming_normal_(Tensor t, double a, FanMode mode, Nonlinearity nonlinearity, Generator* gen) {
  check_floating("kaiming_normal_", t);
  if (leave_alone(t)) return t;
  double std = calculate_gain(nonlinearity, a) / std::sqrt(double(fan("kaiming_normal_", t, mode)));
  return normal_(std::move(t), 0.0, std, gen);
}

}  // namespace ember::nn::init
