// Sizes, names and the promotion lattice of ember's dtypes.
#include "ember/core/dtype.h"

#include <ostream>

#include "ember/core/error.h"

namespace ember {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float32: return 4;
    case DType::Float64: return 8;
    case DType::Float16: return 2;
    case DType::BFloat16: return 2;
    case DType::Int32: return 4;
    case DType::Int64: return 8;
    case DType::Bool: return 1;
  }
  EMBER_INTERNAL_ASSERT(false, "dtype_size: unknown dtype " << int(t));
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::Bool: return "bool";
  }
  return "unknown";
}

std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::Bool) return b;
  if (b == DType::Bool) return a;
  bool fa = is_floating(a), fb = is_floating(b);
  if (fa && !fb) return a;
  if (fb && !fa) return b;
  if (!fa) return DType::Int64;  // int32 with int64
  // Both floating and different.
  if (a == DType::Float64 || b == DType::Float64) return DType::Float64;
  return DType::Float32;  // float32 with a half type, or float16 with bfloat16
}

}  // namespace ember
