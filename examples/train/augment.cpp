// Random horizontal flips: one draw per image, a reversed-column gather and a
// select.
#include "examples/train/augment.h"

#include "core/error.h"
#include "core/ops.h"

namespace ember::train {

Tensor random_hflip(const Tensor& images) {
  EMBER_CHECK(images.dim() == 4, "random_hflip: expected images (N, C, H, W), got " << shape_str(images.shape()));
  const int64_t n = images.size(0), width = images.size(3);
  const Tensor flip = lt(rand({n, 1, 1, 1}, images.dtype(), images.device()), 0.5);
  const Tensor reversed = arange(width - 1, -1, -1, DType::Int64, images.device());
  return where(flip, index_select(images, 3, reversed), images);
}

}  // namespace ember::train
