// CPU kernels of the ordering family (contract in ember/core/ops/sort_kernels.h).
// sort orders each row's indices with a comparator that breaks ties by
// index, a strict total order, so std::sort and std::partial_sort (for
// k < n) give exactly the stable order. Half types compare as float.
// searchsorted is a binary search per value.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>
#include <vector>

#include "ember/core/ops/sort_kernels.h"
#include "ember/kernels/acc_type.h"

namespace ember::cpu {
namespace {

// a < b in the family's order: NaN above every number.
template <typename A>
bool before(A a, A b) {
  if constexpr (std::is_floating_point_v<A>) {
    if (std::isnan(a)) return false;
    if (std::isnan(b)) return true;
  }
  return a < b;
}

template <typename T>
void sort_rows(const SortArgs& a) {
  using A = acc_t<T>;
  std::vector<int64_t> order(size_t(a.n));
  std::vector<A> v(size_t(a.n));
  for (int64_t r = 0; r < a.rows; ++r) {
    const T* x = static_cast<const T*>(a.in) + r * a.n;
    for (int64_t j = 0; j < a.n; ++j) v[size_t(j)] = A(x[j]);
    std::iota(order.begin(), order.end(), int64_t(0));
    auto first = [&](int64_t i, int64_t j) {
      const A vi = v[size_t(i)], vj = v[size_t(j)];
      if (a.descending ? before(vj, vi) : before(vi, vj)) return true;
      if (a.descending ? before(vi, vj) : before(vj, vi)) return false;
      return i < j;
    };
    if (a.k < a.n) std::partial_sort(order.begin(), order.begin() + a.k, order.end(), first);
    else std::sort(order.begin(), order.end(), first);
    std::copy(order.begin(), order.begin() + a.k, a.out + r * a.k);
  }
}

template <typename T>
void search_rows(const SearchSortedArgs& a) {
  using A = acc_t<T>;
  const T* sorted = static_cast<const T*>(a.sorted);
  const T* values = static_cast<const T*>(a.values);
  for (int64_t r = 0; r < a.rows; ++r) {
    const T* row = sorted + (a.rows_sorted == 1 ? 0 : r) * a.n;
    for (int64_t j = 0; j < a.m; ++j) {
      const A v = A(values[r * a.m + j]);
      int64_t lo = 0, hi = a.n;  // the answer lies in [lo, hi]
      while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        const A s = A(row[mid]);
        if (a.right ? !before(v, s) : before(s, v)) lo = mid + 1;
        else hi = mid;
      }
      a.out[r * a.m + j] = lo;
    }
  }
}

void sort_cpu(const SortArgs& a) {
  if (a.rows == 0 || a.k == 0) return;
  EMBER_DISPATCH_DTYPE(a.dtype, "sort", [&]<typename T>() { sort_rows<T>(a); });
}

void searchsorted_cpu(const SearchSortedArgs& a) {
  if (a.rows == 0 || a.m == 0) return;
  EMBER_DISPATCH_DTYPE(a.dtype, "searchsorted", [&]<typename T>() { search_rows<T>(a); });
}

}  // namespace

EMBER_REGISTER_KERNEL(sort_stub, DeviceType::CPU, sort_cpu);
EMBER_REGISTER_KERNEL(searchsorted_stub, DeviceType::CPU, searchsorted_cpu);

}  // namespace ember::cpu
