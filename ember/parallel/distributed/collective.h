// Collective: one call of a collective operation, as ProcessGroup hands it
// to a backend after checking it (see ember/parallel/distributed/process_group.h), and how
// errors and the EMBER_DISTRIBUTED_DEBUG check name it.
#pragma once

#include <cstdint>
#include <string>

#include "ember/core/tensor.h"

namespace ember::parallel {

// How all_reduce and reduce_scatter combine the ranks' values. Avg is the
// sum divided by the group size (floating dtypes only).
enum class ReduceOp : uint8_t { Sum, Avg, Max, Min };
const char* reduce_op_name(ReduceOp op);  // "sum", "avg", "max", "min"

enum class CollectiveKind : uint8_t { AllReduce, Broadcast, AllGather, ReduceScatter, Barrier };
const char* collective_name(CollectiveKind kind);  // "all_reduce", "broadcast", ...

struct Collective {
  CollectiveKind kind = CollectiveKind::Barrier;
  uint64_t seq = 0;             // the group's count of collectives, this one included (the first is #1)
  ReduceOp op = ReduceOp::Sum;  // AllReduce, ReduceScatter
  int root = 0;                 // Broadcast
  // AllReduce, Broadcast: the tensors, reduced or broadcast in place as one
  // collective. AllGather: {input}. ReduceScatter: {output}.
  TensorList tensors;
  // AllGather: the outputs, one per rank. ReduceScatter: the inputs, one per rank.
  TensorList per_rank;

  // What every rank must agree on, with no device index (ranks use
  // different GPUs): "all_reduce(sum) of [4, 3] float32 on cuda".
  std::string signature() const;
  // For errors: "all_reduce #3 (sum) of [4, 3] float32 on cuda:0".
  std::string str() const;
};

}  // namespace ember::parallel
