// Random flips (one draw per image, a reversed-column gather and a select)
// and random shifts (one draw per image and axis, a gather of the shifted
// rows and then columns, and a mask of the positions that came from
// outside the image).
#include "examples/train/augment.h"

#include "ember/core/error.h"
#include "ember/core/ops.h"

namespace ember::train {

Tensor random_hflip(const Tensor& images) {
  EMBER_CHECK(images.dim() == 4, "random_hflip: expected images (N, C, H, W), got " << shape_str(images.shape()));
  const int64_t n = images.size(0), width = images.size(3);
  const Tensor flip = lt(rand({n, 1, 1, 1}, images.dtype(), images.device()), 0.5);
  const Tensor reversed = arange(width - 1, -1, -1, DType::Int64, images.device());
  return where(flip, index_select(images, 3, reversed), images);
}

namespace {

// Moves images (N, C, H, W) along `dim` (2 or 3) by shift (N, 1, 1, 1):
// out[..., i, ...] = in[..., i - shift, ...], zero where i - shift is
// outside [0, size).
Tensor shift_along(const Tensor& images, int64_t dim, const Tensor& shift) {
  const int64_t size = images.size(dim);
  Shape index_shape{1, 1, 1, 1};
  index_shape[size_t(dim)] = size;
  const Tensor source = arange(0, size, 1, DType::Int64, images.device()).view(index_shape) - shift;
  const Tensor inside = logical_and(ge(source, int64_t(0)), lt(source, size));
  const Tensor index = clamp(source, int64_t(0), size - 1).expand(images.shape()).contiguous();
  return where(inside, gather(images, dim, index), 0.0);
}

}  // namespace

Tensor random_shift(const Tensor& images, int64_t max_shift) {
  EMBER_CHECK(images.dim() == 4, "random_shift: expected images (N, C, H, W), got " << shape_str(images.shape()));
  EMBER_CHECK(max_shift >= 0, "random_shift: max_shift must be non-negative, got " << max_shift);
  if (max_shift == 0) return images;
  const int64_t n = images.size(0);
  const Tensor dy = randint(-max_shift, max_shift + 1, {n, 1, 1, 1}, DType::Int64, images.device());
  const Tensor dx = randint(-max_shift, max_shift + 1, {n, 1, 1, 1}, DType::Int64, images.device());
  return shift_along(shift_along(images, 2, dy), 3, dx);
}

}  // namespace ember::train
