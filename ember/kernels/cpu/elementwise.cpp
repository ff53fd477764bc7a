// CPU kernels of the elementwise family: unary, binary, compare, where,
// cast/copy, fill and random. Each computes in acc_t (float for half types)
// with the math of ember/kernels/elementwise_math.h.
#include <cmath>
#include <type_traits>

#include "ember/core/philox.h"
#include "ember/kernels/cpu/loops.h"
#include "ember/kernels/elementwise_math.h"

namespace ember::cpu {
namespace {

void unary_kernel(UnaryOp op, const ElementwiseArgs& args, DType dtype) {
  EMBER_DISPATCH_DTYPE(dtype, "unary", [&]<typename T>() {
    using A = acc_t<T>;
    EMBER_SWITCH_UNARY_OP(op, OP, {
      if constexpr (math::unary_supported<OP, T>()) {
        cpu_map<T, T>(args, [](T x) { return T(math::unary<OP>(A(x))); });
      } else {
        EMBER_FAIL("unary op " << int(op) << " has no kernel for dtype " << dtype_name(dtype));
      }
    });
  });
}

void binary_kernel(BinaryOp op, const ElementwiseArgs& args, DType dtype, const ScalarOperand& scalar) {
  EMBER_DISPATCH_DTYPE(dtype, "binary", [&]<typename T>() {
    using A = acc_t<T>;
    EMBER_SWITCH_BINARY_OP(op, OP, {
      if constexpr (!math::binary_supported<OP, T>()) {
        EMBER_FAIL("binary op " << int(op) << " is not defined for dtype " << dtype_name(dtype));
      } else if (scalar.side == ScalarOperand::Side::None) {
        cpu_map<T, T, T>(args, [](T a, T b) { return T(math::binary<OP>(A(a), A(b))); });
      } else {
        A s = scalar.value.to<A>();
        if (scalar.side == ScalarOperand::Side::Rhs) {
          cpu_map<T, T>(args, [s](T a) { return T(math::binary<OP>(A(a), s)); });
        } else {
          cpu_map<T, T>(args, [s](T b) { return T(math::binary<OP>(s, A(b))); });
        }
      }
    });
  });
}

void compare_kernel(CompareOp op, const ElementwiseArgs& args, DType dtype, const ScalarOperand& scalar) {
  EMBER_DISPATCH_DTYPE(dtype, "compare", [&]<typename T>() {
    using A = acc_t<T>;
    EMBER_SWITCH_COMPARE_OP(op, OP, {
      if (scalar.side == ScalarOperand::Side::None) {
        cpu_map<bool, T, T>(args, [](T a, T b) { return math::compare<OP>(A(a), A(b)); });
      } else {
        A s = scalar.value.to<A>();
        if (scalar.side == ScalarOperand::Side::Rhs) {
          cpu_map<bool, T>(args, [s](T a) { return math::compare<OP>(A(a), s); });
        } else {
          cpu_map<bool, T>(args, [s](T b) { return math::compare<OP>(s, A(b)); });
        }
      }
    });
  });
}

void where_kernel(const ElementwiseArgs& args, DType dtype) {
  EMBER_DISPATCH_DTYPE(dtype, "where",
                       [&]<typename T>() { cpu_map<T, bool, T, T>(args, [](bool c, T a, T b) { return c ? a : b; }); });
}

void cast_kernel(const ElementwiseArgs& args, DType out_dtype, DType in_dtype) {
  EMBER_DISPATCH_DTYPE(out_dtype, "copy", [&]<typename O>() {
    EMBER_DISPATCH_DTYPE(in_dtype, "copy", [&]<typename I>() {
      if constexpr (std::is_same_v<O, I>) {
        cpu_map<O, I>(args, [](I x) { return x; });
      } else if constexpr (std::is_same_v<O, bool>) {
        cpu_map<O, I>(args, [](I x) { return acc_t<I>(x) != acc_t<I>(0); });
      } else {
        // Through the wider of the two compute types, so int64 -> double is exact.
        cpu_map<O, I>(args, [](I x) { return O(acc_t<O>(acc_t<I>(x))); });
      }
    });
  });
}

void fill_kernel(const ElementwiseArgs& args, DType dtype, const Scalar& value) {
  EMBER_DISPATCH_DTYPE(dtype, "fill", [&]<typename T>() {
    T v = T(value.to<acc_t<T>>());
    cpu_map<T>(args, [v]() { return v; });
  });
}

void random_kernel(const ElementwiseArgs& args, DType dtype, RandomKind kind, GeneratorState st, double a, double b) {
  EMBER_DISPATCH_FLOAT(dtype, "random", [&]<typename T>() {
    if (kind == RandomKind::Uniform) {
      float lo = float(a), span = float(b - a);
      cpu_generate<T>(args, [&](int64_t i) {
        philox::Uint4 r = philox::generate(st.seed, st.offset + uint64_t(i));
        T v = T(lo + span * philox::uniform(r.x));
        // Rounding to a 16-bit type can reach b; keep [a, b) as PyTorch does.
        return double(acc_t<T>(v)) < b ? v : T(lo);
      });
    } else {
      float mean = float(a), std = float(b);
      cpu_generate<T>(args, [&](int64_t i) {
        philox::Uint4 r = philox::generate(st.seed, st.offset + uint64_t(i));
        float u1 = philox::uniform_open0(r.x), u2 = philox::uniform(r.y);
        float z = std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853071795864769f * u2);
        return T(mean + std * z);
      });
    }
  });
}

void arange_kernel(const ElementwiseArgs& args, DType dtype, const ArangeSequence& seq) {
  EMBER_DISPATCH_DTYPE(dtype, "arange", [&]<typename T>() {
    cpu_generate<T>(args, [&](int64_t i) {
      if constexpr (std::is_integral_v<T>) {
        return seq.floating ? T(seq.start + double(i) * seq.step) : T(seq.int_start + i * seq.int_step);
      } else {
        return T(seq.floating ? seq.start + double(i) * seq.step : double(seq.int_start + i * seq.int_step));
      }
    });
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(unary_stub, DeviceType::CPU, unary_kernel);
EMBER_REGISTER_KERNEL(binary_stub, DeviceType::CPU, binary_kernel);
EMBER_REGISTER_KERNEL(compare_stub, DeviceType::CPU, compare_kernel);
EMBER_REGISTER_KERNEL(where_stub, DeviceType::CPU, where_kernel);
EMBER_REGISTER_KERNEL(cast_stub, DeviceType::CPU, cast_kernel);
EMBER_REGISTER_KERNEL(fill_stub, DeviceType::CPU, fill_kernel);
EMBER_REGISTER_KERNEL(random_stub, DeviceType::CPU, random_kernel);
EMBER_REGISTER_KERNEL(arange_stub, DeviceType::CPU, arange_kernel);

}  // namespace ember::cpu
