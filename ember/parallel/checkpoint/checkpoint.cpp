// Non-reentrant activation checkpointing (see ember/parallel/checkpoint/checkpoint.h).
//
// A Frame is one checkpointed call. During its forward, the frame's hooks
// replace every tensor an op saves by a Handle (the index of that save) and
// record the tensor's shape, dtype and device. The first Handle unpacked in
// backward makes the frame run the function again under recompute hooks,
// which put the i-th tensor saved into slot i; each Handle then serves its
// slot. A Handle dies with the node that saved it and empties its slot, so
// a recomputed tensor lives exactly as long as the original would have. The
// frame keeps its inputs as SavedTensors: plain tensors at the top level,
// and inside an enclosing checkpoint, Handles of that one (so an inner
// frame's inputs are recomputed by the outer frame too).
#include "ember/parallel/checkpoint/checkpoint.h"

#include <algorithm>
#include <optional>

#include "ember/core/autocast_state.h"
#include "ember/core/autograd/function.h"
#include "ember/core/autograd/saved_tensor_hooks.h"
#include "ember/core/generator.h"
#include "ember/core/grad_mode.h"

namespace ember::parallel {
namespace detail {
namespace {

struct TensorMeta {
  Shape shape;
  DType dtype;
  Device device;
  bool operator==(const TensorMeta& o) const { return shape == o.shape && dtype == o.dtype && device == o.device; }
};

TensorMeta meta_of(const Tensor& t) { return {t.shape(), t.dtype(), t.device()}; }

std::string str(const TensorMeta& m) {
  return shape_str(m.shape) + " " + dtype_name(m.dtype) + " on " + m.device.str();
}

// The default generators a checkpoint replays and their states.
struct RngStates {
  std::vector<std::pair<Device, GeneratorState>> states;

  static RngStates capture(const std::vector<Device>& devices) {
    RngStates r;
    for (const Device& d : devices) r.states.push_back({d, default_generator(d).get_state()});
    return r;
  }
  void restore() const {
    for (const auto& [device, state] : states) default_generator(device).set_state(state);
  }
  std::vector<Device> devices() const {
    std::vector<Device> out;
    for (const auto& s : states) out.push_back(s.first);
    return out;
  }
};

class Frame : public std::enable_shared_from_this<Frame> {
 public:
  Frame(CheckpointBody body, const TensorList& inputs, const CheckpointOptions& options)
      : body_(std::move(body)), autocast_(autocast_state::get_state()) {
    std::vector<Device> devices{kCPU};
    for (const Tensor& t : inputs) {
      // Saved detached: the frame needs the values, not the history.
      saved_inputs_.push_back(t.defined() ? autograd::SavedTensor(t.detach()) : autograd::SavedTensor());
      requires_grad_.push_back(t.defined() && t.requires_grad());
      if (t.defined() && t.is_cuda() && std::find(devices.begin(), devices.end(), t.device()) == devices.end()) {
        devices.push_back(t.device());
      }
    }
    if (options.preserve_rng_state) rng_ = RngStates::capture(devices);
  }

  // Forward: a save becomes a Handle to slot index.
  size_t add_save(const Tensor& t) {
    metas_.push_back(meta_of(t));
    slots_.emplace_back();
    live_.push_back(true);
    return metas_.size() - 1;
  }

  // Recomputation: the index-th save of the rerun.
  void fill(size_t index, const Tensor& t) {
    EMBER_CHECK(index < metas_.size(),
                "checkpoint: the recomputed forward saved more tensors for backward than the original forward ("
                    << metas_.size()
                    << "); the checkpointed function must compute the same thing each time it "
                       "runs (no data-dependent control flow, no changed module state)");
    const TensorMeta m = meta_of(t);
    EMBER_CHECK(m == metas_[index], "checkpoint: tensor "
                                        << index << " saved for backward by the recomputed forward is " << str(m)
                                        << ", but the original forward saved " << str(metas_[index])
                                        << "; the checkpointed function must compute the same "
                                           "thing each time it runs");
    if (live_[index]) slots_[index] = t.detach();
  }

  void release(size_t index) {
    live_[index] = false;
    slots_[index] = Tensor();
  }

  Tensor get(size_t index) {
    EMBER_CHECK(!GradMode::is_enabled(),
                "checkpoint: backward with create_graph=true (higher-order gradients) through a checkpointed "
                "function is not supported; compute that part without checkpoint");
    if (!slots_[index].defined()) recompute();
    return slots_[index];
  }

 private:
  void recompute();

  CheckpointBody body_;
  std::vector<autograd::SavedTensor> saved_inputs_;
  std::vector<bool> requires_grad_;
  std::optional<RngStates> rng_;
  autocast_state::State autocast_;
  std::vector<TensorMeta> metas_;  // per save of the forward
  std::vector<Tensor> slots_;      // recomputed saves, while their Handle lives
  std::vector<bool> live_;         // whether save i's Handle still exists
  bool recomputing_ = false;
};

class Handle final : public autograd::PackedTensor {
 public:
  Handle(std::shared_ptr<Frame> frame, size_t index) : frame_(std::move(frame)), index_(index) {}
  ~Handle() override { frame_->release(index_); }
  Tensor unpack() override { return frame_->get(index_); }

 private:
  std::shared_ptr<Frame> frame_;
  size_t index_;
};

class ForwardHooks final : public autograd::SavedTensorHooks {
 public:
  explicit ForwardHooks(std::shared_ptr<Frame> frame) : frame_(std::move(frame)) {}
  std::shared_ptr<autograd::PackedTensor> pack(const Tensor& t) override {
    return std::make_shared<Handle>(frame_, frame_->add_save(t));
  }

 private:
  std::shared_ptr<Frame> frame_;
};

// What the recomputation's own graph keeps: nothing (that graph is never
// run backward).
class Discarded final : public autograd::PackedTensor {
 public:
  Tensor unpack() override {
    EMBER_FAIL("checkpoint: backward through the graph of a checkpoint's recomputation, which is internal");
  }
};

class RecomputeHooks final : public autograd::SavedTensorHooks {
 public:
  explicit RecomputeHooks(Frame* frame) : frame_(frame) {}
  std::shared_ptr<autograd::PackedTensor> pack(const Tensor& t) override {
    frame_->fill(count_++, t);
    return std::make_shared<Discarded>();
  }
  size_t count() const { return count_; }

 private:
  Frame* frame_;
  size_t count_ = 0;
};

// Sets the forward's autocast state and RNG states for the recomputation and
// puts the caller's back afterwards, also when it throws.
class ReplayScope {
 public:
  ReplayScope(const autocast_state::State& forward_autocast, const std::optional<RngStates>& forward_rng)
      : autocast_(autocast_state::get_state()) {
    if (forward_rng) {
      rng_ = RngStates::capture(forward_rng->devices());
      forward_rng->restore();
    }
    autocast_state::set_state(forward_autocast);
    autocast_state::enter_region();
  }
  ~ReplayScope() {
    autocast_state::exit_region();
    autocast_state::set_state(autocast_);
    if (rng_) rng_->restore();
  }
  ReplayScope(const ReplayScope&) = delete;
  ReplayScope& operator=(const ReplayScope&) = delete;

 private:
  autocast_state::State autocast_;
  std::optional<RngStates> rng_;
};

void Frame::recompute() {
  EMBER_CHECK(!recomputing_,
              "checkpoint: the recomputation of a checkpointed function needed one of its own saved "
              "tensors; the function must not run backward itself");
  recomputing_ = true;
  struct Done {
    bool& flag;
    ~Done() { flag = false; }
  } done{recomputing_};
  // The inputs first: inside an enclosing checkpoint, this unpack may run
  // that one's recomputation.
  TensorList inputs;
  for (size_t i = 0; i < saved_inputs_.size(); ++i) {
    Tensor t;
    if (saved_inputs_[i].defined()) {
      t = saved_inputs_[i].unpack("checkpoint (an input of the checkpointed function)").detach();
      if (requires_grad_[i]) t.set_requires_grad(true);
    }
    inputs.push_back(std::move(t));
  }
  size_t saved = 0;
  {
    ReplayScope replay(autocast_, rng_);
    EnableGradGuard grad;
    RecomputeHooks hooks(this);
    autograd::SavedTensorHooksGuard guard(&hooks);
    body_(inputs);
    saved = hooks.count();
  }
  EMBER_CHECK(saved == metas_.size(), "checkpoint: the recomputed forward saved "
                                          << saved << " tensors for backward, but the original forward saved "
                                          << metas_.size()
                                          << "; the checkpointed function must compute the same thing each time it "
                                             "runs (no data-dependent control flow, no changed module state)");
}

}  // namespace

TensorList checkpoint_tensors(CheckpointBody body, const TensorList& inputs, const CheckpointOptions& options) {
  if (!GradMode::is_enabled()) return body(inputs);
  auto frame = std::make_shared<Frame>(body, inputs, options);
  ForwardHooks hooks(frame);
  autograd::SavedTensorHooksGuard guard(&hooks);
  return body(inputs);
}

}  // namespace detail

Tensor checkpoint_sequential(const nn::Sequential& sequential, int64_t segments, const Tensor& input,
                             const CheckpointOptions& options) {
  const int64_t n = int64_t(sequential.size());
  EMBER_CHECK(segments >= 1 && segments <= n,
              "checkpoint_sequential: segments must be between 1 and the number of "
              "modules ("
                  << n << "), but is " << segments);
  std::vector<std::shared_ptr<nn::UnaryModule>> modules(sequential.begin(), sequential.end());
  auto run = [modules](int64_t begin, int64_t end) {
    return [modules, begin, end](const Tensor& x) {
      Tensor y = x;
      for (int64_t i = begin; i < end; ++i) y = modules[size_t(i)]->forward(y);
      return y;
    };
  };
  const int64_t size = n / segments;
  Tensor x = input;
  int64_t begin = 0;
  for (int64_t s = 0; s + 1 < segments; ++s, begin += size) x = checkpoint(options, run(begin, begin + size), x);
  return run(begin, n)(x);
}

}  // namespace ember::parallel
