// The values every process-group test (gloo, nccl) sends through its
// collectives, and what the collectives must give back, computed on the
// host independently of any backend.
#pragma once

#include <algorithm>
#include <vector>

#include "ember/ember.h"

namespace ember::testing {

// Rank r's value at index i: small integers in [-5, 5], exact in every dtype,
// whose sums over 8 ranks stay exact in bfloat16 too.
inline double rank_value(int r, int64_t i) { return double((r * 7 + i * 3) % 11) - 5; }

// rank_value(r, offset .. offset + n - 1).
inline std::vector<double> rank_values(int r, int64_t n, int64_t offset = 0) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(rank_value(r, i + offset));
  return v;
}

// rank_values as a CPU tensor of dtype.
inline Tensor rank_tensor(int r, int64_t n, DType dtype, int64_t offset = 0) {
  return from_vector<double>(rank_values(r, n, offset), {n}).to(dtype);
}

// The values of a tensor on any device, as doubles.
inline std::vector<double> values_of(const Tensor& t) { return to_vector<double>(t.cpu().to(DType::Float64)); }

// The reduction over ranks 0..size-1 of rank_value(r, i), element by element.
inline std::vector<double> expected_reduction(parallel::ReduceOp op, int size, int64_t n, int64_t offset = 0) {
  using parallel::ReduceOp;
  std::vector<double> out;
  for (int64_t i = 0; i < n; ++i) {
    double acc = rank_value(0, i + offset);
    for (int r = 1; r < size; ++r) {
      double v = rank_value(r, i + offset);
      acc = op == ReduceOp::Max ? std::max(acc, v) : op == ReduceOp::Min ? std::min(acc, v) : acc + v;
    }
    out.push_back(op == ReduceOp::Avg ? acc / size : acc);
  }
  return out;
}

}  // namespace ember::testing
