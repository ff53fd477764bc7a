// nn::init: in-place initializers for parameters, as torch.nn.init.
//
// Contract:
// - Each initializer writes t's elements in place (under NoGradGuard, so it
//   works on leaves that require grad), keeps t's shape, dtype and device,
//   and returns t. Random ones draw from `gen`, or from the default
//   generator of t's device; values are drawn in float32 (float64 for a
//   float64 tensor) and then cast.
// - Fans follow PyTorch: for a weight of shape (out, in, k...) fan_in is
//   in * prod(k) and fan_out is out * prod(k); fewer than 2 dims is an error.
// - A zero-element tensor is left as it is.
// - While a SkipInitGuard lives on the calling thread, every initializer
//   returns t untouched: Module::clone_as constructs the copy under one, so
//   a clone spends no time initializing values it then overwrites and
//   draws no random numbers (a clone leaves the random streams unchanged).
#pragma once

#include <cstdint>
#include <utility>

#include "ember/core/generator.h"
#include "ember/core/tensor.h"

namespace ember::nn::init {

enum class Nonlinearity { Linear, Conv1d, Conv2d, Conv3d, Sigmoid, Tanh, ReLU, LeakyReLU, SELU };
enum class FanMode { FanIn, FanOut };

// torch.nn.init.calculate_gain; param is LeakyReLU's negative slope.
double calculate_gain(Nonlinearity nonlinearity, double param = 0.01);
// (fan_in, fan_out) of a weight of at least 2 dims.
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t);

Tensor uniform_(Tensor t, double a = 0.0, double b = 1.0, Generator* gen = nullptr);
Tensor normal_(Tensor t, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
Tensor constant_(Tensor t, double value);
Tensor zeros_(Tensor t);
Tensor ones_(Tensor t);
// U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out)).
Tensor xavier_uniform_(Tensor t, double gain = 1.0, Generator* gen = nullptr);
// N(0, s^2) with s = gain * sqrt(2 / (fan_in + fan_out)).
Tensor xavier_normal_(Tensor t, double gain = 1.0, Generator* gen = nullptr);
// U(-b, b) with b = gain(nonlinearity, a) * sqrt(3 / fan); nn layers use
// a = sqrt(5), which gives b = 1 / sqrt(fan_in).
Tensor kaiming_uniform_(Tensor t, double a = 0.0, FanMode mode = FanMode::FanIn,
                        Nonlinearity nonlinearity = Nonlinearity::LeakyReLU, Generator* gen = nullptr);
// N(0, s^2) with s = gain(nonlinearity, a) / sqrt(fan).
Tensor kaiming_normal_(Tensor t, double a = 0.0, FanMode mode = FanMode::FanIn,
                       Nonlinearity nonlinearity = Nonlinearity::LeakyReLU, Generator* gen = nullptr);

// Turns the initializers above into no-ops on this thread for its scope.
class SkipInitGuard {
 public:
  SkipInitGuard();
  ~SkipInitGuard();
  SkipInitGuard(const SkipInitGuard&) = delete;
  SkipInitGuard& operator=(const SkipInitGuard&) = delete;
};
bool is_init_skipped();

}  // namespace ember::nn::init
