// CUDA bias-epilogue GEMM on cublasLt (contract in core/ops/gemm_kernels.h).
//
// One cublasLtMatmul with CUBLASLT_EPILOGUE_BIAS: the bias is added to the
// accumulator before the single rounding into C, so y = x W^T + b costs one
// pass over y. The operands are swapped as for cuBLAS: cublasLt's A is our
// b, its B our a, and each layout is the stored row-major matrix read
// column-major (rows = stored columns) with our leading dim; the bias runs
// along cublasLt's rows, our columns. Compute types are those of
// kernels/cuda/blas_types.h (TF32 only when allow_tf32() is on).
//
// The heuristic is told the real alignment of every pointer (its default
// assumes 256 bytes) and, for the 16-bit types, to skip split-K schemes that
// reduce in the output type, so the result is rounded once. Its answer
// depends only on the problem (device, dtype, compute type, transposes,
// sizes, leading dims, alignments), so it is asked once per problem and
// kept (the query costs microseconds of host time at every call otherwise). The kernel
// declines (returns false) when the heuristic offers no algorithm, for
// non-floating dtypes, and for the shapes PyTorch also keeps off its
// cublasLt path: a dim of 1 or one of 65535 * 32 or more.
#include <cstdint>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "core/cuda/cublas_check.h"
#include "core/cuda/device.h"
#include "core/cuda/stream.h"
#include "core/ops/gemm_kernels.h"
#include "kernels/cuda/blas_types.h"
#include "kernels/cuda/cublas_handle.h"

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

bool lt_suits(const GemmArgs& g) {
  constexpr int64_t kMaxDim = 65535 * 32;
  return is_floating(g.dtype) && g.m > 1 && g.n > 1 && g.k > 1 && g.m < kMaxDim && g.n < kMaxDim && g.k < kMaxDim;
}

// What the heuristic's answer depends on; all fields one width, so the key
// has no padding and compares and hashes as bytes.
struct Problem {
  int64_t device, dtype, compute_type, trans_a, trans_b;
  int64_t m, n, k, lda, ldb, ldc;
  int64_t align_a, align_b, align_c, workspace;
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

// The algorithm per problem; found == false: cublasLt has none.
struct Choice {
  bool found = false;
  cublasLtMatmulAlgo_t algo = {};
};

std::mutex choices_mutex;
std::unordered_map<Problem, Choice, ProblemHash> choices;

// cublasLt's first choice for the problem.
Choice ask_heuristic(const LtContext& lt, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a_layout,
                     cublasLtMatrixLayout_t b_layout, cublasLtMatrixLayout_t c_layout, const Problem& problem,
                     DType dtype) {
  Preference pref;
  EMBER_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.pref));
  set(pref.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t(lt.workspace_size));
  set(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, uint32_t(problem.align_b));  // cublasLt's A is our b
  set(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, uint32_t(problem.align_a));
  set(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, uint32_t(problem.align_c));
  set(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, uint32_t(problem.align_c));
  if (dtype == DType::Float16 || dtype == DType::BFloat16) {
    set(pref.pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, uint32_t(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE));
  }

  cublasLtMatmulHeuristicResult_t heuristic = {};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(lt.handle, desc, a_layout, b_layout, c_layout,
                                                                c_layout, pref.pref, 1, &heuristic, &found);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && found == 0)) return Choice{};
  if (status != CUBLAS_STATUS_SUCCESS) {
    detail::throw_cublas_error(status, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
  }
  return Choice{true, heuristic.algo};
}

// Runs the GEMM, or returns false when cublasLt offers no algorithm.
bool lt_gemm_bias(const GemmArgs& g, const void* bias) {
  const cudaDataType_t type = blas_type(g.dtype);
  const cudaDataType_t scale_type = g.dtype == DType::Float64 ? CUDA_R_64F : CUDA_R_32F;
  const BlasScalars scalars(g.dtype, g.alpha, 0.0);
  LtContext lt = lt_handle(g.device);
  cudaStream_t stream = current_stream(g.device).handle();

  MatmulDesc desc;
  EMBER_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.desc, blas_compute_type(g.dtype), scale_type));
  set(desc.desc, CUBLASLT_MATMUL_DESC_TRANSA, g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
  set(desc.desc, CUBLASLT_MATMUL_DESC_TRANSB, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
  set(desc.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
  set(desc.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  set(desc.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t(type));

  const Layout a_layout(type, g.trans_b ? g.k : g.n, g.trans_b ? g.n : g.k, g.ldb);  // our b
  const Layout b_layout(type, g.trans_a ? g.m : g.k, g.trans_a ? g.k : g.m, g.lda);  // our a
  const Layout c_layout(type, g.n, g.m, g.ldc);

  Problem problem;
  problem.device = g.device;
  problem.dtype = int(g.dtype);
  problem.compute_type = int(blas_compute_type(g.dtype));
  problem.trans_a = g.trans_a;
  problem.trans_b = g.trans_b;
  problem.m = g.m;
  problem.n = g.n;
  problem.k = g.k;
  problem.lda = g.lda;
  problem.ldb = g.ldb;
  problem.ldc = g.ldc;
  problem.align_a = alignment(g.a);
  problem.align_b = alignment(g.b);
  problem.align_c = alignment(g.c);
  problem.workspace = int64_t(lt.workspace_size);
  Choice choice;
  bool known = false;
  {
    std::lock_guard<std::mutex> lock(choices_mutex);
    if (auto it = choices.find(problem); it != choices.end()) {
      choice = it->second;
      known = true;
    }
  }
  if (!known) {
    choice = ask_heuristic(lt, desc.desc, a_layout.layout, b_layout.layout, c_layout.layout, problem, g.dtype);
    std::lock_guard<std::mutex> lock(choices_mutex);
    choices.emplace(problem, choice);
  }
  if (!choice.found) return false;
  EMBER_CUBLAS_CHECK(cublasLtMatmul(lt.handle, desc.desc, scalars.alpha(), g.b, a_layout.layout, g.a, b_layout.layout,
                                    scalars.beta(), g.c, c_layout.layout, g.c, c_layout.layout, &choice.algo,
                                    lt.workspace, lt.workspace_size, stream));
  return true;
}

bool gemm_bias_kernel(const GemmArgs& g, const void* bias) {
  EMBER_CHECK(g.batch == 1 && g.beta == 0, "gemm_bias: takes one matrix with beta 0, but got a batch of "
                                               << g.batch << " with beta " << g.beta << " for " << gemm_str(g));
  if (!lt_suits(g)) return false;
  DeviceGuard guard(g.device);
  try {
    return lt_gemm_bias(g, bias);
  } catch (const OutOfMemoryError&) {
    throw;  // the workspace allocation's own message already says what to do
  } catch (const Error& e) {
    EMBER_FAIL("gemm_bias on cuda:" << g.device << " failed for " << gemm_str(g) << " plus a bias of " << g.n
                                    << " elements: " << e.what());
  }
}

}  // namespace

EMBER_REGISTER_KERNEL(gemm_bias_stub, DeviceType::CUDA, gemm_bias_kernel);

}  // namespace ember::cuda
