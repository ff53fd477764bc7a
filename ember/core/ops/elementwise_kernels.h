// Kernel signatures and stubs of the elementwise family; ember/kernels/cpu and
// ember/kernels/cuda register one implementation of each per device type.
//
// Contract for every kernel here: the front-end in ember/core/ops has already
// checked shapes, devices and dtypes, promoted inputs to one compute dtype,
// allocated the output and built the ElementwiseArgs (operand 0 = output).
// Half types compute in float and round once on store.
#pragma once

#include <cstdint>

#include "ember/core/generator.h"
#include "ember/core/kernel_stub.h"
#include "ember/core/ops/elementwise_args.h"
#include "ember/core/scalar.h"

namespace ember {

enum class UnaryOp : uint8_t {
  Neg,
  Exp,
  Log,
  Sqrt,
  Rsqrt,
  Tanh,
  Sigmoid,
  Relu,
  Gelu,
  GeluTanh,
  Abs,
  Sign,
  Sin,
  Cos,
  Reciprocal,
  Square,
  LogicalNot,
  Erf
};

// a op b. The *Backward ops fuse a gradient formula: a is the incoming
// gradient, b what the forward saved (its input x or its output y).
enum class BinaryOp : uint8_t {
  Add,
  Sub,
  Mul,
  Div,
  Maximum,
  Minimum,
  Pow,
  LogicalAnd,
  LogicalOr,
  ReluBackward,      // b > 0 ? a : 0           (b = x)
  GeluBackward,      // a * gelu'(b)            (b = x)
  GeluTanhBackward,  // a * gelu_tanh'(b)       (b = x)
  TanhBackward,      // a * (1 - b * b)         (b = y)
  SigmoidBackward,   // a * b * (1 - b)         (b = y)
};

enum class CompareOp : uint8_t { Eq, Ne, Lt, Le, Gt, Ge };

// A Scalar standing in for one side of a binary op: with side Lhs the op is
// value op tensor, with Rhs tensor op value; the args then hold the output
// and the one tensor operand.
struct ScalarOperand {
  enum class Side : uint8_t { None, Lhs, Rhs };
  Side side = Side::None;
  Scalar value;
};

enum class RandomKind : uint8_t { Uniform, Normal };

using UnaryKernelFn = void(UnaryOp op, const ElementwiseArgs& args, DType dtype);
using BinaryKernelFn = void(BinaryOp op, const ElementwiseArgs& args, DType dtype, const ScalarOperand& scalar);
// Output is bool; inputs are `dtype`.
using CompareKernelFn = void(CompareOp op, const ElementwiseArgs& args, DType dtype, const ScalarOperand& scalar);
// Operands: out, cond (bool), a, b; out, a and b are `dtype`.
using WhereKernelFn = void(const ElementwiseArgs& args, DType dtype);
// out = cast(in): operands out (out_dtype), in (in_dtype); also a plain strided copy.
using CastKernelFn = void(const ElementwiseArgs& args, DType out_dtype, DType in_dtype);
using FillKernelFn = void(const ElementwiseArgs& args, DType dtype, const Scalar& value);
// Fills operand 0 with Uniform [a, b) or Normal (mean a, std b) values from
// Philox at `state`; element i uses word i of the stream (philox.h).
using RandomKernelFn = void(const ElementwiseArgs& args, DType dtype, RandomKind kind, GeneratorState state, double a,
                            double b);
// arange's sequence: element i is int_start + i * int_step counted in int64
// (integral bounds), or start + i * step in double (floating bounds), then
// converted to the output's dtype.
struct ArangeSequence {
  bool floating = false;
  double start = 0, step = 1;
  int64_t int_start = 0, int_step = 1;
};
// Fills operand 0 (dense) with arange's sequence, element i being term i. On
// the device itself, so a CUDA graph captures it.
using ArangeKernelFn = void(const ElementwiseArgs& args, DType dtype, const ArangeSequence& seq);
// Copies nbytes between two dense buffers on different devices (or between
// two CUDA devices). Registered by the CUDA backend under DeviceType::CUDA.
using CrossDeviceCopyFn = void(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);

extern KernelStub<UnaryKernelFn> unary_stub;
extern KernelStub<BinaryKernelFn> binary_stub;
extern KernelStub<CompareKernelFn> compare_stub;
extern KernelStub<WhereKernelFn> where_stub;
extern KernelStub<CastKernelFn> cast_stub;
extern KernelStub<FillKernelFn> fill_stub;
extern KernelStub<RandomKernelFn> random_stub;
extern KernelStub<ArangeKernelFn> arange_stub;
extern KernelStub<CrossDeviceCopyFn> cross_device_copy_stub;

}  // namespace ember
