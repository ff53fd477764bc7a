// cublasLt GEMM and its per-problem algorithm choice (contract in
// ember/kernels/cuda/libraries/lt_matmul.h).
//
// The operands are swapped as for cuBLAS: cublasLt's A is our b, its B our
// a, and each layout is the stored row-major matrix read column-major (rows
// = stored columns) with our leading dim. The heuristic is told the real alignment of every
// pointer (its default assumes 256 bytes). A bias runs along cublasLt's
// rows, our columns; a bias gradient is BGRADB, the sums of cublasLt's B
// (our op(A)) over k, one per column of its D (our rows). The GELU
// epilogue's aux matrix (of C's type) is laid out as C, its leading dim at
// least cublasLt's rows (our n); DGELU reads the same layout, and
// DGELU_BGRAD's bias gradient runs along cublasLt's rows as a bias does: one
// per our column, summed over our rows.
#include "ember/kernels/cuda/libraries/lt_matmul.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ember/core/allocator.h"
#include "ember/core/cuda/cublas_check.h"
#include "ember/core/cuda/cuda_check.h"
#include "ember/core/cuda/graph.h"
#include "ember/core/cuda/stream.h"
#include "ember/core/error.h"
#include "ember/core/ops.h"
#include "ember/kernels/cuda/libraries/blas_types.h"
#include "ember/kernels/cuda/libraries/cublas_handle.h"
#include "ember/kernels/cuda/libraries/fastest_candidate.h"

namespace ember::cuda {
namespace {

// Owners of cublasLt descriptors; a destructor never throws.
struct MatmulDesc {
  cublasLtMatmulDesc_t desc = nullptr;
  ~MatmulDesc() {
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

struct Layout {
  cublasLtMatrixLayout_t layout = nullptr;
  Layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld) {
    EMBER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, uint64_t(rows), uint64_t(cols), ld));
  }
  ~Layout() {
    if (layout) cublasLtMatrixLayoutDestroy(layout);
  }
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
};

struct Preference {
  cublasLtMatmulPreference_t pref = nullptr;
  ~Preference() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
  }
};

template <typename V>
void set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const V& value) {
  EMBER_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}

template <typename V>
void set(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const V& value) {
  EMBER_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
}

// The largest power of two, up to 256, that divides the address.
uint32_t alignment(const void* p) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 1;
  while (a < 256 && address % (2 * a) == 0) a *= 2;
  return a;
}

// Leading dims below the stored rows' widths are left to cuBLAS, whose
// error names them.
// PyTorch keeps dims of kMaxDim or more off cublasLt.
constexpr int64_t kMaxDim = 65535 * 32;

bool lt_suits(const GemmArgs& g, const LtEpilogue& e) {
  const bool half = g.dtype == DType::Float16 || g.dtype == DType::BFloat16;
  // cublasLt requires the GELU aux leading dim to be a multiple of 8. The
  // forward's aux comes with a bias; the backward's reads C's own type.
  const void* aux = e.gelu_aux != nullptr ? e.gelu_aux : e.gelu_input;
  const bool aux_fits =
      aux == nullptr || (e.ld_aux >= g.n && e.ld_aux % 8 == 0 && reinterpret_cast<uintptr_t>(aux) % 16 == 0 &&
                         (e.gelu_aux == nullptr || e.bias != nullptr) &&
                         (e.gelu_input == nullptr || (e.bias == nullptr && e.c_dtype == g.dtype)));
  return is_floating(g.dtype) && (e.c_dtype == g.dtype || (half && e.c_dtype == DType::Float32)) && g.batch == 1 &&
         g.m > 1 && g.n > 1 && g.k > 1 && g.m < kMaxDim && g.n < kMaxDim && g.k < kMaxDim &&
         g.lda >= (g.trans_a ? g.m : g.k) && g.ldb >= (g.trans_b ? g.k : g.n) && g.ldc >= g.n && aux_fits;
}

// What the algorithm depends on; all fields one width, so the key has no
// padding and compares and hashes as bytes.
struct Problem {
  int64_t device, dtype, c_dtype, compute_type, trans_a, trans_b, epilogue;
  int64_t m, n, k, lda, ldb, ldc, ld_aux;
  int64_t align_a, align_b, align_c, align_vector, align_aux, workspace;
  bool operator==(const Problem& o) const { return std::memcmp(this, &o, sizeof(Problem)) == 0; }
};

struct ProblemHash {
  size_t operator()(const Problem& p) const {
    size_t h = 1469598103934665603ull;
    const auto* bytes = reinterpret_cast<const unsigned char*>(&p);
    for (size_t i = 0; i < sizeof(Problem); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
    return h;
  }
};

// The algorithm kept for a problem; found == false: cublasLt has none.
struct Choice {
  bool found = false;
  cublasLtMatmulAlgo_t algo = {};
};

std::mutex choices_mutex;
std::unordered_map<Problem, Choice, ProblemHash>& choices() {
  static auto* const map = new std::unordered_map<Problem, Choice, ProblemHash>;  // outlives every caller
  return *map;
}

cublasLtEpilogue_t epilogue_of(const LtEpilogue& e) {
  if (e.gelu_input) return e.bias_grad ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU;
  if (e.gelu_aux) return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  return e.bias ? CUBLASLT_EPILOGUE_BIAS : e.bias_grad ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_DEFAULT;
}

// One GEMM's descriptors, operands and context: what a run of any
// algorithm takes.
struct Call {
  const GemmArgs& g;
  DType c_dtype;
  LtContext lt;
  cudaStream_t stream;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a_layout, b_layout, c_layout;
  BlasScalars scalars;

  cublasStatus_t run(const cublasLtMatmulAlgo_t& algo, void* c) const {
    return cublasLtMatmul(lt.handle, desc, scalars.alpha(), g.b, a_layout, g.a, b_layout, scalars.beta(), c, c_layout,
                          c, c_layout, &algo, lt.workspace, lt.workspace_size, stream);
  }
};

// Up to kCandidates algorithms in the heuristic's order of preference.
std::vector<cublasLtMatmulAlgo_t> candidates(const Call& call, const Problem& problem) {
  Preference pref;
  EMBER_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.pref));
  set(pref.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t(call.lt.workspace_size));
  set(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, uint32_t(problem.align_b));  // cublasLt's A is our b
  set(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, uint32_t(problem.align_a));
  set(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, uint32_t(problem.align_c));
  set(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, uint32_t(problem.align_c));
  if (call.g.dtype == DType::Float16 || call.g.dtype == DType::BFloat16) {
    set(pref.pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, uint32_t(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE));
  }
  cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
  int found = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(call.lt.handle, call.desc, call.a_layout, call.b_layout, call.c_layout,
                                     call.c_layout, pref.pref, kCandidates, results, &found);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) return {};
  if (status != CUBLAS_STATUS_SUCCESS) {
    detail::throw_cublas_error(status, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
  }
  std::vector<cublasLtMatmulAlgo_t> algos;
  for (int i = 0; i < found; ++i) {
    if (results[i].state == CUBLAS_STATUS_SUCCESS) algos.push_back(results[i].algo);
  }
  return algos;
}

// The fastest of the candidates on this problem, timed on the call's stream
// (ember/kernels/cuda/libraries/fastest_candidate.h); the first one when none runs.
cublasLtMatmulAlgo_t fastest(const Call& call, const std::vector<cublasLtMatmulAlgo_t>& algos) {
  const GemmArgs& g = call.g;
  // beta == 0: C is write-only and the real call overwrites it (a bias
  // gradient too); otherwise the runs must not touch the C they read.
  const size_t scratch_bytes = g.beta != 0 ? size_t((g.m - 1) * g.ldc + g.n) * dtype_size(call.c_dtype) : 0;
  const DataPtr scratch = allocator_for(DeviceType::CUDA).allocate(scratch_bytes, cuda_device(g.device));
  void* c = g.beta != 0 ? scratch.get() : g.c;
  return algos[fastest_candidate(g.device, algos.size(),
                                 [&](size_t i) { return call.run(algos[i], c) == CUBLAS_STATUS_SUCCESS; })];
}

Choice choose(const Call& call, const Problem& problem) {
  const std::vector<cublasLtMatmulAlgo_t> algos = candidates(call, problem);
  if (algos.empty()) return Choice{};
  if (algos.size() == 1 || !gemm_autotune() || is_capturing(call.g.device)) return Choice{true, algos[0]};
  return Choice{true, fastest(call, algos)};
}

Problem problem_of(const GemmArgs& g, const LtEpilogue& e, size_t workspace) {
  Problem problem;
  problem.device = g.device;
  problem.dtype = int(g.dtype);
  problem.c_dtype = int(e.c_dtype);
  problem.compute_type = int(blas_compute_type(g.dtype));
  problem.trans_a = g.trans_a;
  problem.trans_b = g.trans_b;
  problem.epilogue = int(epilogue_of(e));
  problem.m = g.m;
  problem.n = g.n;
  problem.k = g.k;
  problem.lda = g.lda;
  problem.ldb = g.ldb;
  problem.ldc = g.ldc;
  const void* aux = e.gelu_aux != nullptr ? e.gelu_aux : e.gelu_input;
  problem.ld_aux = aux ? e.ld_aux : 0;
  problem.align_a = alignment(g.a);
  problem.align_b = alignment(g.b);
  problem.align_c = alignment(g.c);
  problem.align_vector = e.bias ? alignment(e.bias) : e.bias_grad ? alignment(e.bias_grad) : 0;
  problem.align_aux = aux ? alignment(aux) : 0;
  problem.workspace = int64_t(workspace);
  return problem;
}

// A problem's descriptors, made once per thread (creating and destroying
// them cost microseconds of host time at every call), and its algorithm
// once known. They are the thread's own, so setting the bias (or bias
// gradient) and aux pointers, the attributes that change from call to call,
// races with no other thread. Both are set before the heuristic runs, which
// reads the aux pointer's alignment from it.
struct Prepared {
  Prepared(const GemmArgs& g, const LtEpilogue& e)
      : a_layout(blas_type(g.dtype), g.trans_b ? g.k : g.n, g.trans_b ? g.n : g.k, g.ldb),  // our b
        b_layout(blas_type(g.dtype), g.trans_a ? g.m : g.k, g.trans_a ? g.k : g.m, g.lda),  // our a
        c_layout(blas_type(e.c_dtype), g.n, g.m, g.ldc) {
    const cudaDataType_t scale_type = g.dtype == DType::Float64 ? CUDA_R_64F : CUDA_R_32F;
    EMBER_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.desc, blas_compute_type(g.dtype), scale_type));
    set(desc.desc, CUBLASLT_MATMUL_DESC_TRANSA, g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
    set(desc.desc, CUBLASLT_MATMUL_DESC_TRANSB, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
    if (const cublasLtEpilogue_t epilogue = epilogue_of(e); epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
      set(desc.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
    }
    if (e.bias || e.bias_grad) set(desc.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t(blas_type(e.c_dtype)));
    if (e.gelu_aux || e.gelu_input) set(desc.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, e.ld_aux);
  }
  MatmulDesc desc;
  Layout a_layout, b_layout, c_layout;
  std::optional<Choice> choice;  // empty until known
};

std::unordered_map<Problem, std::unique_ptr<Prepared>, ProblemHash>& thread_prepared() {
  thread_local std::unordered_map<Problem, std::unique_ptr<Prepared>, ProblemHash> map;
  return map;
}

// The GEMM on operands as they are.
bool run_as_stored(const GemmArgs& g, const LtEpilogue& e) {
  const LtContext lt = lt_handle(g.device);
  const Problem problem = problem_of(g, e, lt.workspace_size);
  std::unique_ptr<Prepared>& slot = thread_prepared()[problem];
  if (slot == nullptr) slot = std::make_unique<Prepared>(g, e);
  Prepared& p = *slot;
  if (e.bias != nullptr) set(p.desc.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, e.bias);
  if (e.bias_grad != nullptr) set(p.desc.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, e.bias_grad);
  if (e.gelu_aux != nullptr) set(p.desc.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, e.gelu_aux);
  if (e.gelu_input != nullptr) set(p.desc.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, e.gelu_input);
  const Call call{g,
                  e.c_dtype,
                  lt,
                  current_stream(g.device).handle(),
                  p.desc.desc,
                  p.a_layout.layout,
                  p.b_layout.layout,
                  p.c_layout.layout,
                  BlasScalars(g.dtype, g.alpha, g.beta)};
  if (!p.choice) {
    {
      std::lock_guard<std::mutex> lock(choices_mutex);
      if (auto it = choices().find(problem); it != choices().end()) p.choice = it->second;
    }
    if (!p.choice) {
      const Choice mine = choose(call, problem);
      std::lock_guard<std::mutex> lock(choices_mutex);
      p.choice = choices().emplace(problem, mine).first->second;  // a choice another thread kept first wins
    }
  }
  if (!p.choice->found) return false;
  EMBER_CUBLAS_CHECK(call.run(p.choice->algo, g.c));
  return true;
}

// cublasLt has only its align-1 kernels for rows that do not start on
// 16-byte boundaries (a leading dim of an odd number of 16-bit elements, as
// the logits of GPT-2's 50257-token vocabulary) and for an n or a k that is
// not a multiple of 16 bytes' elements: on the H100 GPT-2's head GEMMs ran
// 4 to 6 times slower than aligned ones. Above kPaddedMinMacs
// multiply-adds such a product runs on copies: A and B zero-padded to the
// next multiple in k (and B in n) with aligned rows, C computed in a buffer
// of n rounded up and copied out (cudaMemcpy2DAsync, at copy bandwidth). n
// stays as it is under a bias or GELU epilogue, whose vectors have n
// elements and whose aux matrix keeps its own leading dim.
constexpr double kPaddedMinMacs = double(1 << 28);

int64_t round_up(int64_t x, int64_t multiple) { return (x + multiple - 1) / multiple * multiple; }

// Elements of `element` bytes in 16 bytes.
int64_t per_16_bytes(size_t element) { return int64_t(16 / element); }

bool rows_misaligned(const void* p, int64_t ld, size_t element) {
  return alignment(p) < 16 || (size_t(ld) * element) % 16 != 0;
}

// A padded_rows x padded_cols matrix of `element`-byte values with aligned
// rows, on the current stream's device: `src`'s rows x cols in its corner
// (when given) and zeros around it (when zero_pads).
struct PaddedCopy {
  int64_t ld;
  DataPtr storage;

  PaddedCopy(int device, int64_t rows, int64_t cols, int64_t padded_rows, int64_t padded_cols, size_t element,
             const void* src, int64_t src_ld, bool zero_pads, cudaStream_t stream)
      : ld(round_up(padded_cols, per_16_bytes(element))),
        storage(allocator_for(DeviceType::CUDA).allocate(size_t(padded_rows * ld) * element, cuda_device(device))) {
    auto* base = static_cast<char*>(storage.get());
    const size_t pitch = size_t(ld) * element;
    if (src != nullptr) {
      EMBER_CUDA_CHECK(cudaMemcpy2DAsync(base, pitch, src, size_t(src_ld) * element, size_t(cols) * element,
                                         size_t(rows), cudaMemcpyDeviceToDevice, stream));
    }
    if (!zero_pads) return;
    if (padded_cols > cols) {
      EMBER_CUDA_CHECK(cudaMemset2DAsync(base + size_t(cols) * element, pitch, 0, size_t(padded_cols - cols) * element,
                                         size_t(rows), stream));
    }
    if (padded_rows > rows) {
      EMBER_CUDA_CHECK(cudaMemsetAsync(base + size_t(rows) * pitch, 0, size_t(padded_rows - rows) * pitch, stream));
    }
  }
};

// The padded sizes of g's n and k (see kPaddedMinMacs).
std::pair<int64_t, int64_t> padded_n_k(const GemmArgs& g, const LtEpilogue& e) {
  const int64_t per = per_16_bytes(dtype_size(g.dtype));
  const bool n_fixed = e.bias != nullptr || e.gelu_aux != nullptr || e.gelu_input != nullptr;
  return {n_fixed ? g.n : round_up(g.n, per), round_up(g.k, per)};
}

bool needs_padding(const GemmArgs& g, const LtEpilogue& e) {
  if (double(g.m) * double(g.n) * double(g.k) < kPaddedMinMacs) return false;
  const size_t element = dtype_size(g.dtype);
  const auto [n, k] = padded_n_k(g, e);
  if (n >= kMaxDim || k >= kMaxDim) return false;
  return n != g.n || k != g.k || rows_misaligned(g.a, g.lda, element) || rows_misaligned(g.b, g.ldb, element) ||
         rows_misaligned(g.c, g.ldc, dtype_size(e.c_dtype));
}

// The product on padded copies; false when cublasLt has no algorithm for
// them. Throws OutOfMemoryError when the copies do not fit.
bool run_on_padded_copies(const GemmArgs& g, const LtEpilogue& e) {
  const size_t element = dtype_size(g.dtype), c_element = dtype_size(e.c_dtype);
  const cudaStream_t stream = current_stream(g.device).handle();
  const auto [n, k] = padded_n_k(g, e);
  GemmArgs padded = g;
  padded.n = n;
  padded.k = k;
  std::optional<PaddedCopy> a, b, c;
  if (k != g.k || rows_misaligned(g.a, g.lda, element)) {
    // Stored k x m (transposed) or m x k; its k grows.
    a.emplace(g.device, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.trans_a ? k : g.m, g.trans_a ? g.m : k, element,
              g.a, g.lda, true, stream);
    padded.a = a->storage.get();
    padded.lda = a->ld;
  }
  if (n != g.n || k != g.k || rows_misaligned(g.b, g.ldb, element)) {
    // Stored n x k (transposed) or k x n; both grow.
    b.emplace(g.device, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.trans_b ? n : k, g.trans_b ? k : n, element,
              g.b, g.ldb, true, stream);
    padded.b = b->storage.get();
    padded.ldb = b->ld;
  }
  if (n != g.n || rows_misaligned(g.c, g.ldc, c_element)) {
    // C's extra columns are computed and dropped: they need no zeros.
    c.emplace(g.device, g.m, g.n, g.m, n, c_element, g.beta != 0 ? g.c : nullptr, g.ldc, false, stream);
    padded.c = c->storage.get();
    padded.ldc = c->ld;
  }
  if (!run_as_stored(padded, e)) return false;
  if (c) {
    EMBER_CUDA_CHECK(cudaMemcpy2DAsync(g.c, size_t(g.ldc) * c_element, c->storage.get(), size_t(c->ld) * c_element,
                                       size_t(g.n) * c_element, size_t(g.m), cudaMemcpyDeviceToDevice, stream));
  }
  return true;
}

// The padded copies are an optimisation: when they do not fit in memory,
// or cublasLt has no algorithm for them, the product runs as stored. The
// copies queued before a failed allocation only write the copies' own
// memory, which goes back to the allocator in stream order.
bool run_padded(const GemmArgs& g, const LtEpilogue& e) {
  try {
    if (run_on_padded_copies(g, e)) return true;
  } catch (const OutOfMemoryError&) {
  }
  return run_as_stored(g, e);
}

}  // namespace

bool lt_matmul(const GemmArgs& g, const LtEpilogue& e) {
  if (!lt_suits(g, e)) return false;
  return needs_padding(g, e) ? run_padded(g, e) : run_as_stored(g, e);
}

}  // namespace ember::cuda
