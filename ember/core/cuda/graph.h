// CUDA graphs: record the kernels a piece of work queues on one device once,
// then replay them all with one launch (torch.cuda.CUDAGraph). Public;
// includes no CUDA header.
//
// A training step of a small model is bound by the host: each of its few
// dozen kernels costs microseconds to launch. Captured in a graph, the step
// costs one launch, and the GPU runs the kernels back to back.
//
//   cuda::Graph graph;
//   step();                             // warm-up, eagerly: see below
//   graph.capture([&] { step(); });     // records, runs nothing
//   for (...) {
//     static_input.copy_(next_batch);   // feed the same tensors each time
//     graph.replay();
//   }
//
// Contract:
// - capture(work) runs `work` on this thread with a stream of the graph's own
//   as the device's current stream, and records the work it queues on that
//   stream instead of running it. Ops run exactly as they would eagerly:
//   shapes are checked, autograd records, tensors are made, but their
//   contents are only written when the graph is replayed. replay() queues
//   the recorded kernels on the device's current stream, in order, reading
//   and writing the same memory every time.
// - Memory: tensors made during capture come from a pool of the graph's
//   own, which nothing outside the graph allocates from while the graph
//   lives; so the outputs (the loss, gradients, ...) stay where the replays
//   write them, and reading them after a replay is ordinary. A tensor made
//   before the capture and freed during it is held by the graph until
//   reset(), because the replays still use it. A tensor made before the
//   capture that the work reads (the static input, the parameters, the
//   optimizer state) must be kept alive by the caller while the graph is
//   replayed, as in PyTorch.
// - What cannot be captured is an ember::Error at the op, and the capture is
//   abandoned, leaving the graph empty and the device usable: anything that
//   waits for the device (item(), cpu(), cuda::synchronize, a stream's
//   synchronize), rand/randn/randint/randperm (they would replay the same
//   numbers), a second capture on the same device at the same time, and
//   one-time setup that CUDA forbids during capture (cuDNN's algorithm
//   search, a library's first use): run the work once before capturing, so
//   such setup happens then (PyTorch asks the same).
// - Dropout is captured: each replay draws a fresh mask, from the default
//   generator (or the one given) advanced by as many numbers as the capture
//   drew, exactly as the same ops run eagerly would, so a seed still replays
//   a run.
// - Values that an op takes from the host at capture are fixed in the graph.
//   Where ember knows of such a value that can change later, replay()
//   checks it first and throws instead of running stale work: an
//   optimizer's options (a learning rate changed by a scheduler, say), or
//   an optimizer destroyed since the capture. Step counters, GradScaler's
//   scale and found-inf flag live on the device and advance on replay.
//   A replay marks autocast's kept weight casts stale (ember/core/autocast_state.h),
//   since it changes weights without moving their versions.
// - reset() waits for the device, then frees the graph, its held tensors
//   and its pool's claim (its tensors still alive stay valid); the graph can
//   capture again. The destructor resets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "ember/core/generator.h"

namespace ember::cuda {

class Graph {
 public:
  // The device (-1: the current one) whose work is captured and replayed.
  explicit Graph(int device = -1);
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  void capture(const std::function<void()>& work);
  void replay();
  void reset();

  bool captured() const;
  int device() const;
  // Kernels, copies and memsets recorded (0 before a capture).
  size_t num_nodes() const;

  struct Impl;  // opaque (core/cuda/graph.cpp)

 private:
  std::unique_ptr<Impl> impl_;
};

// True while this thread captures a graph on `device` (-1: current).
bool is_capturing(int device = -1);

namespace detail {

// Throws an ember::Error saying that `what` cannot run during a capture,
// and `why`, when this thread captures a graph on `device`; else nothing.
void check_not_capturing(int device, const char* what, const char* why);

// While this thread captures a graph on `device`, adds a check that the
// graph runs before every replay (it throws when a value fixed in the graph
// has changed); else nothing.
void add_replay_check(int device, std::function<void()> check);

// While this thread captures a graph on `device`: records that `state`, the
// first of `blocks` Philox blocks just reserved from `generator`, is drawn
// by a captured kernel, and returns the device address of the shift that
// kernel adds to state.offset (0 in eager runs); each replay stores there
// the distance from the capture's draws to as many fresh ones. Else null.
const uint64_t* captured_random_shift(int device, Generator& generator, const GeneratorState& state, uint64_t blocks);

}  // namespace detail
}  // namespace ember::cuda
