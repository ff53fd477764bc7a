// CUDA indexing kernels (gather, scatter-add) against the CPU ones through
// index_select, gather, scatter_add, embedding and one_hot: every dtype,
// every dim, int32 and int64 indices, odd sizes, non-contiguous inputs and
// indices, the 16-byte row path of embedding and its fallbacks, repeated
// indices (atomics: exact with integer-valued data, a tolerance otherwise),
// gradients, and the out-of-range error, raised at the next wait for the
// device without the op waiting, which must leave the process working. Also cat/stack/split/chunk on CUDA, which go
// through copy_.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "support/cuda_compare.h"
#include "support/error_message.h"

#ifdef EMBER_WITH_CUDA
#include "ember/core/cuda/busy_wait.h"
#include "ember/core/cuda/event.h"
#include "ember/core/cuda/stream.h"
#endif

namespace ember {
namespace {

using testing::error_of;

using testing::cuda_matches_cpu;
using testing::kAllDtypes;
using testing::odd_sizes;
using testing::random_values;
using testing::Tolerance;

const DType kFloatTypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};
const DType kIndexTypes[] = {DType::Int64, DType::Int32};

Tensor random_index(int64_t high, const Shape& shape, DType dtype, uint64_t seed) {
  Generator g(seed);
  return randint(0, high, shape, dtype, kCPU, &g);
}

// Scatter-add lands its floating adds in any order; each add rounds, so the
// sums agree with the CPU's within a few roundings of the partial sums.
Tolerance atomic_tolerance(DType dtype) {
  switch (dtype) {
    case DType::Float32: return {1e-4, 1e-4};
    case DType::Float16: return {2e-2, 2e-2};
    case DType::BFloat16: return {1e-1, 1e-1};
    default: return testing::tolerance_for(dtype);
  }
}

std::string what(DType dt, DType it) { return std::string(dtype_name(dt)) + " index " + dtype_name(it); }

// ---------------- index_select ----------------

TEST(CudaIndex, IndexSelectEveryDtypeDimAndIndexType) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : kAllDtypes) {
    Tensor x = random_values({5, 6, 7}, dt, 1);
    for (DType it : kIndexTypes) {
      for (int64_t dim : {0, 1, 2, -1}) {
        Tensor idx = random_index(x.size(dim < 0 ? dim + 3 : dim), {9}, it, 2 + uint64_t(dim));  // repeats
        EXPECT_TRUE(cuda_matches_cpu(
            [dim](const TensorList& in) { return TensorList{index_select(in[0], dim, in[1])}; }, {x, idx}))
            << what(dt, it) << " dim " << dim;
      }
      // Non-contiguous input and index (a strided slice), and a 0-D index.
      Tensor idx = random_index(5, {9}, it, 7);
      EXPECT_TRUE(cuda_matches_cpu(
          [](const TensorList& in) {
            Tensor strided = in[1].slice(0, 0, 9, 2);
            return TensorList{index_select(in[0].permute({2, 0, 1}), 1, strided),
                              index_select(in[0].narrow(2, 1, 5), 0, strided),
                              index_select(in[0].transpose(0, 2), 2, in[1].select(0, 4))};
          },
          {x, idx}))
          << what(dt, it);
    }
  }
}

TEST(CudaIndex, IndexSelectOddSizes) {
  EMBER_REQUIRE_CUDA();
  for (int64_t n : odd_sizes()) {
    for (DType it : kIndexTypes) {
      Tensor x = random_values({n}, DType::Float32, uint64_t(n));
      Tensor idx = random_index(n, {n}, it, uint64_t(n) + 1);
      EXPECT_TRUE(
          cuda_matches_cpu([](const TensorList& in) { return TensorList{index_select(in[0], 0, in[1])}; }, {x, idx}))
          << n << " " << dtype_name(it);
      // Rows of n elements (never 16-byte multiples: the element path) and of 3.
      Tensor rows = random_values({4, n}, DType::Float16, uint64_t(n) + 2);
      Tensor cols = random_values({n, 3}, DType::Float32, uint64_t(n) + 3);
      Tensor r = random_index(4, {7}, it, uint64_t(n) + 4), c = random_index(3, {5}, it, uint64_t(n) + 5);
      Tensor rn = random_index(n, {9}, it, uint64_t(n) + 6);
      EXPECT_TRUE(cuda_matches_cpu(
          [](const TensorList& in) {
            return TensorList{index_select(in[0], 0, in[2]), index_select(in[1], 1, in[3]),
                              index_select(in[1], 0, in[4])};
          },
          {rows, cols, r, c, rn}))
          << n << " " << dtype_name(it);
    }
  }
}

TEST(CudaIndex, IndexSelectGradientsAddRepeatedRows) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : kFloatTypes) {
    for (DType it : kIndexTypes) {
      Tensor x = random_values({6, 9}, dt, 3).set_requires_grad();
      Tensor idx = random_index(6, {17}, it, 4);
      EXPECT_TRUE(cuda_matches_cpu(
          [](const TensorList& in) {
            return TensorList{index_select(in[0], 0, in[1]), index_select(in[0].t(), 1, in[1].slice(0, 1, 17, 3))};
          },
          {x, idx}, /*grads=*/true, atomic_tolerance(dt)))
          << what(dt, it);
    }
  }
}

// ---------------- gather ----------------

TEST(CudaIndex, GatherEveryDtypeDimAndIndexType) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : kAllDtypes) {
    Tensor x = random_values({5, 6, 7}, dt, 5);
    for (DType it : kIndexTypes) {
      for (int64_t dim = 0; dim < 3; ++dim) {
        Shape ishape = {4, 5, 6};  // smaller than x in the other dims
        ishape[size_t(dim)] = 9;
        Tensor idx = random_index(x.size(dim), ishape, it, 6 + uint64_t(dim));
        EXPECT_TRUE(
            cuda_matches_cpu([dim](const TensorList& in) { return TensorList{gather(in[0], dim, in[1])}; }, {x, idx}))
            << what(dt, it) << " dim " << dim;
      }
      // A permuted input and a permuted (non-contiguous) index.
      Tensor idx = random_index(5, {5, 4, 3}, it, 9);
      EXPECT_TRUE(cuda_matches_cpu(
          [](const TensorList& in) {
            Tensor xp = in[0].permute({1, 2, 0});  // (6, 7, 5)
            Tensor ip = in[1].permute({1, 2, 0});  // (4, 3, 5)
            return TensorList{gather(xp, 2, ip), gather(in[0], 0, in[1].transpose(1, 2))};
          },
          {x, idx}))
          << what(dt, it);
    }
  }
}

TEST(CudaIndex, GatherOddSizesAndGradients) {
  EMBER_REQUIRE_CUDA();
  for (int64_t n : odd_sizes()) {
    Tensor x = random_values({2, n}, DType::Float32, uint64_t(n));
    Tensor idx = random_index(n, {2, n}, DType::Int64, uint64_t(n) + 1);
    EXPECT_TRUE(cuda_matches_cpu(
        [](const TensorList& in) {
          return TensorList{gather(in[0], 1, in[1]), gather(in[0].t(), 0, in[1].t())};
        },
        {x, idx}))
        << n;
  }
  for (DType dt : kFloatTypes) {
    for (DType it : kIndexTypes) {
      Tensor x = random_values({7, 5}, dt, 10).set_requires_grad();
      Tensor idx = random_index(5, {6, 11}, it, 11);
      EXPECT_TRUE(cuda_matches_cpu(
          [](const TensorList& in) {
            return TensorList{gather(in[0], 1, in[1]), gather(in[0].t(), 0, in[1].t().narrow(0, 0, 5))};
          },
          {x, idx}, /*grads=*/true, atomic_tolerance(dt)))
          << what(dt, it);
    }
  }
}

// ---------------- scatter_add ----------------

TEST(CudaIndex, ScatterAddEveryDtypeDimAndIndexType) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : kAllDtypes) {
    Tensor x = random_values({5, 6, 7}, dt, 12);
    Tensor src = random_values({6, 7, 8}, dt, 13);  // larger than the index: only the front is used
    for (DType it : kIndexTypes) {
      for (int64_t dim = 0; dim < 3; ++dim) {
        Shape ishape = {4, 5, 6};
        ishape[size_t(dim)] = 6;
        Tensor idx = random_index(x.size(dim), ishape, it, 14 + uint64_t(dim));
        EXPECT_TRUE(
            cuda_matches_cpu([dim](const TensorList& in) { return TensorList{scatter_add(in[0], dim, in[1], in[2])}; },
                             {x, idx, src}, false, atomic_tolerance(dt)))
            << what(dt, it) << " dim " << dim;
      }
      // Permuted input, src and index.
      Tensor idx = random_index(6, {4, 5, 5}, it, 17);
      EXPECT_TRUE(cuda_matches_cpu(
          [](const TensorList& in) {
            Tensor xp = in[0].permute({2, 1, 0});  // (7, 6, 5)
            Tensor sp = in[2].permute({1, 2, 0});  // (7, 8, 6)
            Tensor ip = in[1].permute({1, 0, 2});  // (5, 4, 5)
            return TensorList{scatter_add(xp, 1, ip, sp)};
          },
          {x, idx, src}, false, atomic_tolerance(dt)))
          << what(dt, it);
    }
  }
}

TEST(CudaIndex, ScatterAddOddSizes) {
  EMBER_REQUIRE_CUDA();
  for (int64_t n : odd_sizes()) {
    for (DType dt : kAllDtypes) {
      Tensor x = random_values({n}, dt, uint64_t(n));
      Tensor src = random_values({n}, dt, uint64_t(n) + 1);
      Tensor idx = random_index(n, {n}, DType::Int64, uint64_t(n) + 2);
      EXPECT_TRUE(cuda_matches_cpu(
          [](const TensorList& in) {
            return TensorList{scatter_add(in[0], 0, in[1], in[2]),
                              scatter_add(in[0], 0, in[1].to(DType::Int32), in[2])};
          },
          {x, idx, src}, false, atomic_tolerance(dt)))
          << n << " " << dtype_name(dt);
    }
  }
}

// Thousands of adds into three slots. The data are small integers, so every
// partial sum is exact in the dtype and the result must match exactly,
// whatever order the atomics land in.
TEST(CudaIndex, ScatterAddHeavyContentionIsExactOnIntegerValuedData) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : kAllDtypes) {
    if (dt == DType::Bool) continue;
    const bool narrow_float = dt == DType::Float16 || dt == DType::BFloat16;
    const int64_t n = narrow_float ? 1025 : 65537;  // keeps the 16-bit sums below 256
    Generator g(20);
    Tensor src = randint(narrow_float ? -1 : -8, narrow_float ? 2 : 9, {n}, DType::Int64, kCPU, &g).to(dt);
    Tensor x = zeros({3}, dt);
    for (DType it : kIndexTypes) {
      Tensor idx = random_index(3, {n}, it, 21);
      EXPECT_TRUE(cuda_matches_cpu([](const TensorList& in) { return TensorList{scatter_add(in[0], 0, in[1], in[2])}; },
                                   {x, idx, src}, false, Tolerance{0, 0}))
          << what(dt, it);
    }
  }
  Tensor flags = zeros({2}, DType::Bool);
  Tensor src = random_values({4097}, DType::Bool, 22);
  EXPECT_TRUE(cuda_matches_cpu([](const TensorList& in) { return TensorList{scatter_add(in[0], 0, in[1], in[2])}; },
                               {flags, random_index(2, {4097}, DType::Int64, 23), src}));
}

TEST(CudaIndex, ScatterAddGradients) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : kFloatTypes) {
    for (DType it : kIndexTypes) {
      Tensor x = random_values({4, 6}, dt, 24).set_requires_grad();
      Tensor src = random_values({5, 9}, dt, 25).set_requires_grad();
      Tensor idx = random_index(6, {3, 8}, it, 26);
      Tensor idx0 = random_index(6, {4, 4}, it, 27);
      EXPECT_TRUE(cuda_matches_cpu(
          [](const TensorList& in) {
            return TensorList{scatter_add(in[0], 1, in[2], in[1]),
                              scatter_add(in[0].t(), 0, in[3], in[1].t().narrow(1, 0, 4))};
          },
          {x, src, idx, idx0}, /*grads=*/true, atomic_tolerance(dt)))
          << what(dt, it);
    }
  }
}

// ---------------- embedding ----------------

// Row lengths on and off the 16-byte vector path, a contiguous weight, one
// narrowed inside wider rows (aligned or not, depending on the dtype) and a
// transposed one (strided rows: the element path).
TEST(CudaIndex, EmbeddingRowPathsAndFallbacksWithGradients) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : kFloatTypes) {
    for (int64_t d : {1, 7, 8, 64, 1025}) {
      for (DType it : kIndexTypes) {
        Tensor w = random_values({50, d}, dt, 30 + uint64_t(d)).set_requires_grad();
        Tensor wide = random_values({50, d + 8}, dt, 31 + uint64_t(d)).set_requires_grad();
        Tensor wt = random_values({d, 50}, dt, 32 + uint64_t(d)).set_requires_grad();
        Tensor idx = random_index(50, {6, 9}, it, 33);
        EXPECT_TRUE(cuda_matches_cpu(
            [d](const TensorList& in) {
              return TensorList{embedding(in[0], in[3]), embedding(in[1].narrow(1, 4, d), in[3]),
                                embedding(in[2].t(), in[3].t()), embedding(in[0], in[3].select(1, 2))};
            },
            {w, wide, wt, idx}, /*grads=*/true, atomic_tolerance(dt)))
            << what(dt, it) << " dim " << d;
      }
    }
  }
}

TEST(CudaIndex, EmbeddingEveryDtypeForward) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : kAllDtypes) {
    for (int64_t d : {3, 16}) {
      Tensor w = random_values({20, d}, dt, 40);
      Tensor idx = random_index(20, {5, 7}, DType::Int32, 41);
      EXPECT_TRUE(cuda_matches_cpu([](const TensorList& in) { return TensorList{embedding(in[0], in[1])}; }, {w, idx}))
          << dtype_name(dt) << " dim " << d;
    }
  }
}

// Many tokens into few rows: hundreds of adds per weight element (exact
// tests of that kernel: embedding_backward_test.cpp).
TEST(CudaIndex, EmbeddingBackwardWithManyRepeats) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (DType it : kIndexTypes) {
      Tensor w = random_values({10, 64}, dt, 42).set_requires_grad();
      Tensor idx = random_index(10, {8, 512}, it, 43);
      EXPECT_TRUE(cuda_matches_cpu([](const TensorList& in) { return TensorList{embedding(in[0], in[1])}; }, {w, idx},
                                   /*grads=*/true, atomic_tolerance(dt)))
          << what(dt, it);
    }
  }
}

// ---------------- one_hot ----------------

TEST(CudaIndex, OneHot) {
  EMBER_REQUIRE_CUDA();
  for (int64_t n : odd_sizes()) {
    for (DType it : kIndexTypes) {
      Tensor idx = random_index(10, {n}, it, uint64_t(n));
      EXPECT_TRUE(cuda_matches_cpu(
          [](const TensorList& in) {
            return TensorList{one_hot(in[0]), one_hot(in[0], 12)};
          },
          {idx}))
          << n << " " << dtype_name(it);
    }
  }
  Tensor idx2 = random_index(7, {9, 5}, DType::Int32, 50);
  EXPECT_TRUE(cuda_matches_cpu(
      [](const TensorList& in) {
        return TensorList{one_hot(in[0].t()), one_hot(in[0].slice(0, 1, 9, 2), 7)};
      },
      {idx2}));
}

// ---------------- out-of-range indices ----------------

// These need the CUDA runtime's streams and events, which a CPU-only build
// does not compile.
#ifdef EMBER_WITH_CUDA

// The message of the ember::Error fn throws ("" if none).

::testing::AssertionResult contains(const std::string& message, const std::string& part) {
  if (message.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "the message lacks \"" << part << "\":\n  " << message;
}

// The CPU's message without its source location (" [core/...:N]").
std::string text_of(const std::string& message) { return message.substr(0, message.rfind(" [")); }

// The GPU reports the CPU's message, then where it was found.
::testing::AssertionResult reported_like_the_cpu(const std::string& gpu, const std::string& cpu) {
  if (cpu == "no error") return ::testing::AssertionFailure() << "the CPU threw nothing";
  if (gpu.rfind(text_of(cpu), 0) != 0) {
    return ::testing::AssertionFailure() << "the GPU's message does not start with the CPU's:\n  GPU: " << gpu
                                         << "\n  CPU: " << cpu;
  }
  return contains(gpu, "found on cuda:0 at position");
}

TEST(CudaIndex, OutOfRangeIndexIsTheCpuErrorAtTheNextWaitAndTheProcessKeepsWorking) {
  EMBER_REQUIRE_CUDA();
  const Device gpu = cuda_device(0);
  Tensor x = random_values({3, 4}, DType::Float32, 60);
  Tensor xg = x.to(gpu);
  Tensor bad = from_vector<int64_t>({0, 4, 1});
  // The first check on a device waits for it once (it makes the device's
  // error record): done here, with good indices.
  index_select(xg, 1, from_vector<int64_t>({0, 1}).to(gpu));
  cuda::synchronize(0);
  // The op returns; the error comes with the next wait for the device. (The
  // GPU is kept busy first, so that the check cannot have run before the op
  // returns: then the op itself would raise the error.)
  Tensor bad_gpu = bad.to(gpu);
  cuda::busy_wait(cuda::current_stream(0), 20'000'000);
  EXPECT_EQ(error_of([&] { index_select(xg, 1, bad_gpu); }), "no error");
  const std::string msg = error_of([&] { cuda::synchronize(0); });
  EXPECT_TRUE(contains(msg, "index_select: index 4 is out of bounds for dim 1 with size 4 (valid indices: 0 to 3)"));
  EXPECT_TRUE(contains(msg, "at position 1 of the index"));
  EXPECT_TRUE(reported_like_the_cpu(msg, error_of([&] { index_select(x, 1, bad); })));
  EXPECT_EQ(error_of([&] { cuda::synchronize(0); }), "no error") << "an error is raised once";

  // Every op, int32 and int64, negative values; every call that waits
  // raises it: item(), cpu(), a stream's synchronize, the next index op.
  Tensor neg32 = from_vector<int32_t>({0, -3, 2, 7}, {1, 4});
  EXPECT_TRUE(reported_like_the_cpu(error_of([&] { gather(xg, 0, neg32.to(gpu)).sum().item<double>(); }),
                                    error_of([&] { gather(x, 0, neg32); })));
  Tensor src = ones({1, 4});
  EXPECT_TRUE(reported_like_the_cpu(error_of([&] { scatter_add(xg, 0, neg32.to(gpu), src.to(gpu)).cpu(); }),
                                    error_of([&] { scatter_add(x, 0, neg32, src); })));
  EXPECT_TRUE(reported_like_the_cpu(error_of([&] {
                                      index_select(xg, 1, bad.to(gpu));
                                      cuda::current_stream(0).synchronize();
                                    }),
                                    error_of([&] { index_select(x, 1, bad); })));
  const std::string next_op = error_of([&] {
    index_select(xg, 1, bad.to(gpu));
    cuda::Event done;
    done.record(cuda::current_stream(0));
    while (!done.query()) {
    }  // the check has run (a wait would raise the error): the next index op raises it before it starts
    index_select(xg, 1, from_vector<int64_t>({0, 1}).to(gpu));
  });
  EXPECT_TRUE(reported_like_the_cpu(next_op, error_of([&] { index_select(x, 1, bad); })));

  // A long index whose bad values lie far apart: the first one wins.
  std::vector<int64_t> tokens(70001);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int64_t(i % 3);
  tokens[3001] = 5;
  tokens[60000] = 9;
  tokens[69999] = -1;
  Tensor tok = from_vector<int64_t>(tokens);
  const std::string emb = error_of([&] { embedding(xg, tok.to(gpu)).cpu(); });
  EXPECT_TRUE(contains(emb, "embedding: index 5 is out of bounds for dim 0 with size 3"));
  EXPECT_TRUE(contains(emb, "at position 3001 of the index"));
  EXPECT_TRUE(reported_like_the_cpu(emb, error_of([&] { embedding(x, tok); })));

  // Meanwhile the kernels touched nothing outside the tensors: bad rows
  // gather zeros, bad scatters add nothing.
  Tensor gathered;
  cuda::busy_wait(cuda::current_stream(0), 20'000'000);
  EXPECT_EQ(error_of([&] { gathered = index_select(xg, 1, bad_gpu); }), "no error");
  EXPECT_NE(error_of([&] { cuda::synchronize(0); }), "no error");
  Tensor expected = index_select(x, 1, from_vector<int64_t>({0, 0, 1}));
  expected.select(1, 1).fill_(0.0);
  EXPECT_TRUE(testing::tensors_close(gathered.cpu(), expected, {0, 0}));

  // The context survived: the same tensors still compute the right answers.
  Tensor good = from_vector<int64_t>({3, 0, 3});
  EXPECT_TRUE(testing::tensors_close(index_select(xg, 1, good.to(gpu)), index_select(x, 1, good), {0, 0}));
  EXPECT_TRUE(testing::tensors_close(xg * 2.0 + 1.0, x * 2.0 + 1.0));
  tokens[3001] = tokens[60000] = tokens[69999] = 1;
  Tensor fixed = from_vector<int64_t>(tokens);
  EXPECT_TRUE(testing::tensors_close(embedding(xg, fixed.to(gpu)), embedding(x, fixed), {0, 0}));
}

TEST(CudaIndex, TheIndexCheckDoesNotWaitForTheGpu) {
  EMBER_REQUIRE_CUDA();
  const Device gpu = cuda_device(0);
  Tensor table = randn({1000, 64}, DType::Float32, gpu);
  Tensor index = randint(0, 1000, {4096}, DType::Int64, gpu);
  embedding(table, index);  // the first launches load the kernels' modules
  gather(table, 1, randint(0, 64, {64, 64}, DType::Int64, gpu));
  cuda::synchronize(0);
  cuda::busy_wait(cuda::current_stream(0), 200'000'000);  // 200 ms of GPU time ahead of the ops
  const auto start = std::chrono::steady_clock::now();
  Tensor rows = embedding(table, index);
  Tensor picked = gather(table, 1, randint(0, 64, {64, 64}, DType::Int64, gpu));
  const double host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  cuda::synchronize(0);
  EXPECT_LT(host_ms, 100.0) << "an index op waited for the device";
}

#endif  // EMBER_WITH_CUDA

// ---------------- joining and splitting (copy_ on CUDA) ----------------

TEST(CudaIndex, CatAndStackEveryDtypeAndDim) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : kAllDtypes) {
    Tensor a = random_values({3, 5, 4}, dt, 70), b = random_values({3, 5, 4}, dt, 71);
    Tensor c = random_values({4, 5, 3}, dt, 72);
    for (int64_t dim : {0, 1, 2, -1}) {
      EXPECT_TRUE(cuda_matches_cpu(
          [dim](const TensorList& in) {
            return TensorList{cat({in[0], in[1].narrow(dim < 0 ? 2 : dim, 1, 2)}, dim),
                              cat({in[0], in[2].transpose(0, 2), in[1]}, dim),
                              stack({in[0], in[2].transpose(0, 2)}, dim)};
          },
          {a, b, c}))
          << dtype_name(dt) << " dim " << dim;
    }
  }
  // Promotion inside cat: the cast happens in copy_ on the device.
  Tensor h = random_values({2, 3}, DType::Float16, 73), i = random_values({4, 3}, DType::Int32, 74);
  Tensor d = random_values({1, 3}, DType::Float64, 75);
  EXPECT_TRUE(cuda_matches_cpu(
      [](const TensorList& in) {
        return TensorList{cat({in[0], in[1], in[2]}), stack({in[0], in[0].to(DType::Int64)})};
      },
      {h, i, d}));
}

TEST(CudaIndex, SplitAndChunkOnCudaWithGradients) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : {DType::Float32, DType::Float64, DType::BFloat16}) {
    for (int64_t n : {7, 1025}) {
      Tensor x = random_values({n, 6}, dt, uint64_t(n)).set_requires_grad();
      Tensor y = random_values({5, 6}, dt, uint64_t(n) + 1).set_requires_grad();
      EXPECT_TRUE(cuda_matches_cpu(
          [](const TensorList& in) {
            TensorList out;
            for (const Tensor& p : split(in[0], 3, 0)) out.push_back(p * 2.0);
            for (const Tensor& p : chunk(in[0].t(), 4, 1)) out.push_back(p.contiguous());
            for (const Tensor& p : split(in[1], {1, 3, 2}, 1)) out.push_back(p);
            out.push_back(cat({in[0], in[1]}, 0) * 0.5);
            out.push_back(stack({in[1], in[1].t().t() * 3.0}, 1));
            return out;
          },
          {x, y}, /*grads=*/true))
          << dtype_name(dt) << " n=" << n;
    }
  }
}

}  // namespace
}  // namespace ember
