// Multi-tensor launches for CUDA, after PyTorch's multi_tensor_apply: many
// tensors of one dtype and device are processed by a few kernel launches
// instead of one launch per tensor.
//
// Contract:
// - Each tensor is split into chunks of kOptimChunk elements; a block takes
//   one chunk. for_each_chunk_list() packs the pointers and sizes of up to
//   MaxTensors tensors and kMaxChunkBlocks chunks into a ChunkList passed by
//   value as a kernel argument (so no host-to-device copy is needed), and
//   calls launch(list, blocks) each time one is full and at the end. A
//   tensor whose chunks span two lists is in both.
// - Empty tensors get no chunk. Slot k of a list holds Depth pointers
//   (pick(tensor, d) chooses them), the tensor's size, its step counter and
//   the index of its first chunk among all chunks of the call (tensor by
//   tensor), which the norm kernel uses to place its partial results.
// - The ChunkList stays under the classic 4 KiB kernel-argument limit with
//   room for the kernel's other arguments.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ember/core/ops/optimizer_kernels.h"

namespace ember::cuda {

inline constexpr int kMaxChunkBlocks = 256;
inline constexpr int kMultiTensorThreads = 512;

template <int Depth, int MaxTensors>
struct ChunkList {
  void* ptr[Depth][MaxTensors];
  int64_t numel[MaxTensors];
  int64_t* step[MaxTensors];
  int64_t first_chunk[MaxTensors];
  uint16_t block_tensor[kMaxChunkBlocks];  // the slot of block b's tensor
  int32_t block_chunk[kMaxChunkBlocks];    // the chunk of that tensor block b takes
};

// Within the classic 4 KiB argument space with at least 384 bytes to spare.
template <int Depth, int MaxTensors>
inline constexpr bool fits_kernel_args = sizeof(ChunkList<Depth, MaxTensors>) <= 4096 - 384;

// The list of the kernels that take one buffer per FusedTensor, its param
// (the norm and scale of clip_grad_norm_, the loss-scaling kernels), and
// the pick that fills it.
inline constexpr int kParamListTensors = 64;
using ParamList = ChunkList<1, kParamListTensors>;
inline void* pick_param(const optim::FusedTensor& f, int) { return f.param; }

// The tensor slot, first element and length of this block's chunk.
struct BlockChunk {
  int slot;
  int64_t begin;
  int64_t length;
};

template <int Depth, int MaxTensors>
__device__ __forceinline__ BlockChunk block_chunk(const ChunkList<Depth, MaxTensors>& list) {
  const int slot = list.block_tensor[blockIdx.x];
  const int64_t begin = int64_t(list.block_chunk[blockIdx.x]) * optim::kOptimChunk;
  const int64_t left = list.numel[slot] - begin;
  return {slot, begin, left < optim::kOptimChunk ? left : optim::kOptimChunk};
}

template <int Depth, int MaxTensors, typename Pick, typename Launch>
void for_each_chunk_list(const optim::FusedTensor* tensors, int64_t count, Pick pick, Launch launch) {
  static_assert(fits_kernel_args<Depth, MaxTensors>, "ChunkList too large for the kernel argument space");
  ChunkList<Depth, MaxTensors> list{};
  int slot = 0, blocks = 0;
  int64_t first_chunk = 0;
  for (int64_t t = 0; t < count; ++t) {
    const optim::FusedTensor& f = tensors[t];
    if (f.numel == 0) continue;
    for (int d = 0; d < Depth; ++d) list.ptr[d][slot] = pick(f, d);
    list.numel[slot] = f.numel;
    list.step[slot] = f.step;
    list.first_chunk[slot] = first_chunk;
    const int64_t chunks = (f.numel + optim::kOptimChunk - 1) / optim::kOptimChunk;
    bool tensor_done = false;
    for (int64_t c = 0; c < chunks; ++c) {
      list.block_tensor[blocks] = uint16_t(slot);
      list.block_chunk[blocks] = int32_t(c);
      ++blocks;
      const bool last = c == chunks - 1;
      if (blocks == kMaxChunkBlocks || (last && slot == MaxTensors - 1)) {
        launch(list, blocks);
        blocks = 0;
        if (last) {
          tensor_done = true;
        } else {  // the tensor continues in the next list, in slot 0
          for (int d = 0; d < Depth; ++d) list.ptr[d][0] = list.ptr[d][slot];
          list.numel[0] = list.numel[slot];
          list.step[0] = list.step[slot];
          list.first_chunk[0] = list.first_chunk[slot];
          slot = 0;
        }
      }
    }
    slot = tensor_done ? 0 : slot + 1;
    first_chunk += chunks;
  }
  if (blocks > 0) launch(list, blocks);
}

}  // namespace ember::cuda
