// Training-time augmentation of image batches (N, C, H, W), on the batch's
// device, drawing from that device's default generator (so a seed replays
// it, and a checkpoint's generator state resumes it exactly).
//
// random_hflip mirrors each image left-right with probability 1/2, as
// torchvision's RandomHorizontalFlip: Fashion-MNIST's clothes and shoes are
// still what they were when mirrored, so the network sees twice the views.
//
// random_shift moves each image by its own (dy, dx), each drawn uniformly
// from [-max_shift, max_shift], filling what enters with zeros (the
// background): torchvision's RandomCrop(H, padding=max_shift) on a
// zero-padded image.
#pragma once

#include <cstdint>

#include "ember/core/tensor.h"

namespace ember::train {

Tensor random_hflip(const Tensor& images);
Tensor random_shift(const Tensor& images, int64_t max_shift);

}  // namespace ember::train
