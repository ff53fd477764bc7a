// Factories: filled, ranged, random and host-data tensors, and reading a
// tensor back into a vector.
#include <cmath>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "ember/core/cuda/graph.h"
#include "ember/core/memory_format.h"
#include "ember/core/ops.h"
#include "ember/core/ops/elementwise_kernels.h"
#include "ember/core/philox.h"

namespace ember {

namespace {
Tensor filled(Tensor t, const Scalar& value) {
  fill_stub(t.device().type)(make_elementwise_args("full", t, {}), t.dtype(), value);
  return t;
}
}  // namespace

Tensor full(const Shape& shape, const Scalar& value, DType dtype, Device device) {
  return filled(empty(shape, dtype, device), value);
}
Tensor zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0, dtype, device); }
Tensor ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1, dtype, device); }
// The *_like factories keep t's layout (MemoryFormat::Preserve).
Tensor empty_like(const Tensor& t) { return empty_strided(t.shape(), preserved_strides(t), t.dtype(), t.device()); }
Tensor zeros_like(const Tensor& t) { return filled(empty_like(t), 0); }
Tensor ones_like(const Tensor& t) { return filled(empty_like(t), 1); }
Tensor full_like(const Tensor& t, const Scalar& value) { return filled(empty_like(t), value); }

Tensor arange(const Scalar& end, DType dtype, Device device) { return arange(0, end, 1, dtype, device); }

Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, std::optional<DType> dtype, Device device) {
  bool floating = start.is_floating() || end.is_floating() || step.is_floating();
  DType dt = dtype.value_or(floating ? kDefaultFloat : DType::Int64);
  double s = start.to_double(), e = end.to_double(), st = step.to_double();
  EMBER_CHECK(st != 0, "arange: step must be nonzero");
  EMBER_CHECK((st > 0 && e >= s) || (st < 0 && e <= s),
              "arange: upper bound " << e << " and lower bound " << s << " inconsistent with step sign " << st);
  // Integral bounds are counted in int64: doubles cannot tell 2^60 from 2^60 + 3.
  int64_t is = start.to_int(), ie = end.to_int(), ist = step.to_int();
  EMBER_CHECK(floating || (ist > 0 && ie >= is) || (ist < 0 && ie <= is),
              "arange: upper bound " << ie << " and lower bound " << is << " inconsistent with step sign " << ist);
  int64_t n =
      floating ? int64_t(std::ceil((e - s) / st)) : (ist > 0 ? (ie - is + ist - 1) / ist : (is - ie - ist - 1) / -ist);
  ArangeSequence seq{.floating = floating, .start = s, .step = st, .int_start = is, .int_step = ist};
  Tensor out = empty({n}, dt, device);
  if (n > 0) arange_stub(device.type)(make_elementwise_args("arange", out, {}), dt, seq);
  return out;
}

namespace {
// The numbers of rand, randn, randint and randperm are fixed when the op is
// called (randint and randperm draw them on the host), so a graph would
// replay the same ones: they are refused during a capture.
void check_random_not_captured(Device device, const char* op) {
  if (device.is_cuda()) {
    cuda::detail::check_not_capturing(device.index, op,
                                      "its random numbers are drawn when it is called, so every "
                                      "replay would repeat them (dropout is captured correctly)");
  }
}

// Fills t (uninitialized) with random numbers, in its memory order.
Tensor random_fill(Tensor t, Generator* gen, RandomKind kind, double a, double b, const char* op) {
  const DType dtype = t.dtype();
  const Device device = t.device();
  EMBER_CHECK(is_floating(dtype), op << ": expected a floating dtype, got " << dtype_name(dtype));
  check_random_not_captured(device, op);
  Generator& g = gen ? *gen : default_generator(device);
  GeneratorState st = g.reserve(uint64_t(t.numel()));
  random_stub(device.type)(make_elementwise_args(op, t, {}), dtype, kind, st, a, b);
  return t;
}
}  // namespace

Tensor rand(const Shape& shape, DType dtype, Device device, Generator* gen) {
  return random_fill(empty(shape, dtype, device), gen, RandomKind::Uniform, 0.0, 1.0, "rand");
}
Tensor randn(const Shape& shape, DType dtype, Device device, Generator* gen) {
  return random_fill(empty(shape, dtype, device), gen, RandomKind::Normal, 0.0, 1.0, "randn");
}
Tensor rand_like(const Tensor& t, Generator* gen) {
  return random_fill(empty_like(t), gen, RandomKind::Uniform, 0.0, 1.0, "rand_like");
}
Tensor randn_like(const Tensor& t, Generator* gen) {
  return random_fill(empty_like(t), gen, RandomKind::Normal, 0.0, 1.0, "randn_like");
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, DType dtype, Device device, Generator* gen) {
  EMBER_CHECK(high > low, "randint: high (" << high << ") must be greater than low (" << low << ")");
  check_random_not_captured(device, "randint");
  Tensor cpu = empty(shape, DType::Int64, kCPU);
  Generator& g = gen ? *gen : default_generator(device);
  GeneratorState st = g.reserve(uint64_t(cpu.numel()));
  uint64_t range = uint64_t(high - low);
  int64_t* p = cpu.data<int64_t>();
  for (int64_t i = 0; i < cpu.numel(); ++i) {
    philox::Uint4 r = philox::generate(st.seed, st.offset + uint64_t(i));
    uint64_t bits = (uint64_t(r.x) << 32) | r.y;
    p[i] = low + int64_t(bits % range);
  }
  return cpu.to(device, dtype);
}

Tensor randperm(int64_t n, Device device, Generator* gen) {
  EMBER_CHECK(n >= 0, "randperm: n must be non-negative, got " << n);
  check_random_not_captured(device, "randperm");
  Tensor cpu = empty({n}, DType::Int64, kCPU);
  int64_t* p = cpu.data<int64_t>();
  std::iota(p, p + n, int64_t(0));
  Generator& g = gen ? *gen : default_generator(device);
  GeneratorState st = g.reserve(uint64_t(n));
  for (int64_t i = n - 1; i > 0; --i) {  // Fisher-Yates
    philox::Uint4 r = philox::generate(st.seed, st.offset + uint64_t(i));
    uint64_t bits = (uint64_t(r.x) << 32) | r.y;
    std::swap(p[i], p[int64_t(bits % uint64_t(i + 1))]);
  }
  return cpu.to(device);
}

Tensor from_blob(void* data, const Shape& shape, DType dtype, Device device, const Shape& strides) {
  Shape st = strides;
  if (st.empty()) st = empty(shape, dtype, kCPU).strides();  // contiguous strides
  EMBER_CHECK(st.size() == shape.size(),
              "from_blob: shape " << shape_str(shape) << " and strides " << shape_str(strides) << " differ in length");
  int64_t extent = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) extent = 0;
  }
  if (extent != 0) {
    for (size_t i = 0; i < shape.size(); ++i) extent += (shape[i] - 1) * st[i];
  }
  auto storage = std::make_shared<Storage>(DataPtr(data, [](void*) {}), size_t(extent) * dtype_size(dtype), device);
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), shape, st, 0, dtype));
}

template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device device) {
  Tensor t = empty(shape, dtype_of<T>::value, kCPU);
  EMBER_CHECK(int64_t(values.size()) == t.numel(), "from_vector: " << values.size() << " values do not fill shape "
                                                                   << shape_str(shape) << " (" << t.numel()
                                                                   << " elements)");
  T* p = t.data<T>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];  // also right for std::vector<bool>
  return t.to(device);
}

template <typename T>
std::vector<T> to_vector(const Tensor& t) {
  EMBER_CHECK(t.defined(), "to_vector: the tensor is undefined");
  Tensor c = t.detach().to(kCPU, dtype_of<T>::value).contiguous();
  const T* p = c.data<T>();
  return std::vector<T>(p, p + c.numel());
}

#define EMBER_INSTANTIATE_VECTOR_IO(T)                                         \
  template Tensor from_vector<T>(const std::vector<T>&, const Shape&, Device); \
  template std::vector<T> to_vector<T>(const Tensor&);
EMBER_INSTANTIATE_VECTOR_IO(float)
EMBER_INSTANTIATE_VECTOR_IO(double)
EMBER_INSTANTIATE_VECTOR_IO(Half)
EMBER_INSTANTIATE_VECTOR_IO(BFloat16)
EMBER_INSTANTIATE_VECTOR_IO(int32_t)
EMBER_INSTANTIATE_VECTOR_IO(int64_t)
#undef EMBER_INSTANTIATE_VECTOR_IO

template Tensor from_vector<bool>(const std::vector<bool>&, const Shape&, Device);
template <>
std::vector<bool> to_vector<bool>(const Tensor& t) {
  Tensor c = t.detach().to(kCPU, DType::Bool).contiguous();
  const bool* p = c.data<bool>();
  return std::vector<bool>(p, p + c.numel());
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  EMBER_CHECK(a.shape() == b.shape() || broadcast_shapes("allclose", a.shape(), b.shape()).size() > 0,
              "allclose: shapes differ");
  Shape s = broadcast_shapes("allclose", a.shape(), b.shape());
  std::vector<double> va = to_vector<double>(a.detach().expand(s)), vb = to_vector<double>(b.detach().expand(s));
  for (size_t i = 0; i < va.size(); ++i) {
    if (std::isnan(va[i]) || std::isnan(vb[i])) return false;
    if (va[i] == vb[i]) continue;                              // equal infinities
    if (std::isinf(va[i]) || std::isinf(vb[i])) return false;  // inf - x would pass the test below
    if (std::fabs(va[i] - vb[i]) > atol + rtol * std::fabs(vb[i])) return false;
  }
  return true;
}

bool equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  return to_vector<double>(a) == to_vector<double>(b);
}

}  // namespace ember
