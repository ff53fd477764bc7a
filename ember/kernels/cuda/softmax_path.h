// Which CUDA softmax kernel runs a call: chosen by its shape (the list at the
// top of ember/kernels/cuda/softmax_common.cuh), or forced, so that a benchmark can
// time the paths against one another on one shape and a test can check each
// of them against the CPU (as llm.c's dev/cuda harness forces a kernel
// version). Host code; includes no CUDA header.
//
// Contract:
// - force_softmax_path(path) makes every later CUDA softmax, log_softmax and
//   their backward in this process take `path` (SoftmaxPath::Auto: the
//   shape's choice again) and returns the previous setting. It is a debugging
//   and benchmarking switch, read by every thread, set by one.
// - A forced path that cannot take a call's shape makes that call an
//   ember::Error naming the path, the shape and the reason: Warp takes rows
//   of at most 1024 elements, Register forward rows of whole 16-byte vectors
//   up to 2048 of them, Cached and Online rows of inner == 1 on 16-byte
//   aligned operands (Cached only when the row fits the device's shared
//   memory); Strided takes every shape.
#pragma once

namespace ember::cuda {

enum class SoftmaxPath { Auto, Warp, Register, Cached, Online, Strided };

const char* softmax_path_name(SoftmaxPath path);
SoftmaxPath force_softmax_path(SoftmaxPath path);
SoftmaxPath forced_softmax_path();

}  // namespace ember::cuda
