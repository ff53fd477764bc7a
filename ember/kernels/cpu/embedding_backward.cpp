// CPU kernel of embedding's weight gradient (contract in
// ember/core/ops/embedding_kernels.h).
//
// A counting sort groups the positions by index: the number of positions of
// each row, their prefix sums (each row's first slot), then the positions
// placed in increasing order, so each row's list is ascending. Rows are then
// independent: each sums its positions' grad_out rows in that order into an
// acc_t buffer and writes the row once (zeros for a row with no position),
// in parallel over rows; the sums do not depend on the thread count.
#include <algorithm>
#include <string>
#include <vector>

#include "ember/core/ops/embedding_kernels.h"
#include "ember/core/ops/index_kernels.h"
#include "ember/core/parallel_for.h"
#include "ember/kernels/acc_type.h"

namespace ember::cpu {
namespace {

// Where grouped positions of row r start: first[r], ..., first[r + 1] - 1.
struct PositionsByRow {
  std::vector<int64_t> first;      // num_embeddings + 1
  std::vector<int64_t> positions;  // num_indices, ascending within each row
};

template <typename I>
PositionsByRow group_positions(const EmbeddingBackwardArgs& a) {
  const I* index = static_cast<const I*>(a.indices);
  for (int64_t p = 0; p < a.num_indices; ++p) {
    const int64_t v = int64_t(index[p]);
    if (v < 0 || v >= a.num_embeddings) [[unlikely]] {
      const std::string* context = IndexErrorContext::current();
      EMBER_FAIL(index_error_text(a.op, 0, a.num_embeddings, v, context != nullptr ? *context : std::string()));
    }
  }
  PositionsByRow g;
  g.first.assign(size_t(a.num_embeddings) + 1, 0);
  for (int64_t p = 0; p < a.num_indices; ++p) ++g.first[size_t(index[p]) + 1];
  for (int64_t r = 0; r < a.num_embeddings; ++r) g.first[size_t(r) + 1] += g.first[size_t(r)];
  std::vector<int64_t> next(g.first.begin(), g.first.end() - 1);
  g.positions.resize(size_t(a.num_indices));
  for (int64_t p = 0; p < a.num_indices; ++p) g.positions[size_t(next[size_t(index[p])]++)] = p;
  return g;
}

template <typename T>
void sum_rows(const EmbeddingBackwardArgs& a, const PositionsByRow& g) {
  using A = acc_t<T>;
  T* out = static_cast<T*>(a.grad_weight);
  const T* grad = static_cast<const T*>(a.grad_out);
  const int64_t dim = a.dim, rs = a.grad_out_row_stride, cs = a.grad_out_col_stride;
  const int64_t grain = std::max<int64_t>(1, kCpuGrain / std::max<int64_t>(dim, 1));
  parallel_for(0, a.num_embeddings, grain, [&](int64_t begin, int64_t end) {
    std::vector<A> sum(static_cast<size_t>(dim));
    for (int64_t r = begin; r < end; ++r) {
      T* row = out + r * dim;
      const int64_t first = g.first[size_t(r)], last = g.first[size_t(r) + 1];
      if (first == last) {
        std::fill(row, row + dim, T(0));
        continue;
      }
      std::fill(sum.begin(), sum.end(), A(0));
      for (int64_t i = first; i < last; ++i) {
        const T* src = grad + g.positions[size_t(i)] * rs;
        for (int64_t c = 0; c < dim; ++c) sum[size_t(c)] += A(src[c * cs]);
      }
      for (int64_t c = 0; c < dim; ++c) row[c] = T(sum[size_t(c)]);
    }
  });
}

void embedding_backward_kernel(const EmbeddingBackwardArgs& a) {
  dispatch_index(a.index_dtype, a.op, [&]<typename I>() {
    const PositionsByRow g = group_positions<I>(a);
    EMBER_DISPATCH_FLOAT(a.dtype, a.op, [&]<typename T>() { sum_rows<T>(a, g); });
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(embedding_backward_stub, DeviceType::CPU, embedding_backward_kernel);

}  // namespace ember::cpu
