// Training-time augmentation of image batches (N, C, H, W), on the batch's
// device, drawing from that device's default generator (so a seed replays
// it, and a checkpoint's generator state resumes it exactly).
//
// random_hflip mirrors each image left-right with probability 1/2, as
// torchvision's RandomHorizontalFlip: Fashion-MNIST's clothes and shoes are
// still what they were when mirrored, so the network sees twice the views.
#pragma once

#include "core/tensor.h"

namespace ember::train {

Tensor random_hflip(const Tensor& images);

}  // namespace ember::train
