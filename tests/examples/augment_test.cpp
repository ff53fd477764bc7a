// ember-train's augmentations: every flipped or shifted image is its input
// under one of the allowed transformations (found by trying them all), the
// draws vary across images, and a seed replays them.
#include "examples/train/augment.h"

#include <gtest/gtest.h>

#include <set>
#include <utility>
#include <vector>

#include "ember/ember.h"
#include "support/error_message.h"

namespace ember::train {
namespace {

using testing::throws_with;

// in shifted by (dy, dx) with zeros entering: out[y][x] = in[y - dy][x - dx].
std::vector<float> shifted(const std::vector<float>& in, int64_t c, int64_t h, int64_t w, int64_t dy, int64_t dx) {
  std::vector<float> out(in.size(), 0.0f);
  for (int64_t k = 0; k < c; ++k) {
    for (int64_t y = 0; y < h; ++y) {
      for (int64_t x = 0; x < w; ++x) {
        const int64_t sy = y - dy, sx = x - dx;
        if (sy >= 0 && sy < h && sx >= 0 && sx < w)
          out[size_t((k * h + y) * w + x)] = in[size_t((k * h + sy) * w + sx)];
      }
    }
  }
  return out;
}

TEST(Augment, EveryShiftedImageIsItsInputMovedWithinRange) {
  manual_seed(3);
  const int64_t n = 40, c = 2, h = 7, w = 9, max_shift = 2;
  Tensor images = rand({n, c, h, w}) + 0.5;  // no zeros: a shift is recognizable
  Tensor out = random_shift(images, max_shift);
  ASSERT_EQ(out.shape(), images.shape());
  std::set<std::pair<int64_t, int64_t>> seen;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<float> in = to_vector<float>(images[i]), got = to_vector<float>(out[i]);
    int matches = 0;
    for (int64_t dy = -max_shift; dy <= max_shift; ++dy) {
      for (int64_t dx = -max_shift; dx <= max_shift; ++dx) {
        if (shifted(in, c, h, w, dy, dx) == got) {
          ++matches;
          seen.insert({dy, dx});
        }
      }
    }
    EXPECT_EQ(matches, 1) << "image " << i << " is not its input shifted by at most " << max_shift;
  }
  EXPECT_GT(seen.size(), 10u) << "40 images drew only " << seen.size() << " of the 25 shifts";
  manual_seed(3);
  Tensor again = random_shift(rand({n, c, h, w}) + 0.5, max_shift);
  EXPECT_TRUE(equal(again, out)) << "the same seed replays the same shifts";
  EXPECT_TRUE(equal(random_shift(images, 0), images));
}

TEST(Augment, EveryFlippedImageIsItsInputOrItsMirror) {
  manual_seed(5);
  Tensor images = rand({30, 1, 4, 5});
  Tensor out = random_hflip(images);
  Tensor mirrored = index_select(images, 3, arange(4, -1, -1, DType::Int64));
  int flipped = 0;
  for (int64_t i = 0; i < 30; ++i) {
    const bool same = equal(out[i], images[i]), mirror = equal(out[i], mirrored[i]);
    EXPECT_TRUE(same || mirror) << "image " << i;
    flipped += mirror ? 1 : 0;
  }
  EXPECT_GT(flipped, 5);
  EXPECT_LT(flipped, 25);
}

TEST(Augment, BadArgumentsAreErrors) {
  EXPECT_TRUE(throws_with([] { random_shift(zeros({2, 3}), 1); }, {"random_shift", "(N, C, H, W)", "[2, 3]"}));
  EXPECT_TRUE(throws_with([] { random_shift(zeros({1, 1, 2, 2}), -1); }, {"random_shift", "-1"}));
  EXPECT_TRUE(throws_with([] { random_hflip(zeros({2})); }, {"random_hflip", "[2]"}));
}

}  // namespace
}  // namespace ember::train
