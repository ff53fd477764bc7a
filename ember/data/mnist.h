// MNIST and Fashion-MNIST: the IDX files of a split, as a TensorDataset.
//
// Contract:
// - MNIST(root, train) reads <root>/train-images-idx3-ubyte and
//   <root>/train-labels-idx1-ubyte (train = true) or the t10k- files (the
//   test split), torchvision's file names, each as <name>.gz when that file
//   exists and as <name> otherwise.
// - inputs(): images (N, 1, 28, 28) float32, pixel / 255 in [0, 1] (as
//   torchvision's ToTensor), then (x - mean) / std when normalize is given
//   (as transforms.Normalize). targets(): labels (N) int64 in 0 .. 9.
// - A missing file, images that are not (N, 28, 28), labels that are not (N),
//   counts that differ, or a label outside 0 .. 9 are ember::Errors naming
//   the file.
// - FashionMNIST is the same format; its root defaults to where Debian's
//   dataset-fashion-mnist package installs it (train 60000, test 10000).
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "ember/data/tensor_dataset.h"

namespace ember::data {

struct Normalize {
  double mean = 0;
  double std = 1;
};

inline constexpr const char* kFashionMNISTRoot = "/usr/share/datasets/fashion-mnist";
// The mean and standard deviation of Fashion-MNIST's training pixels (in [0, 1]).
inline constexpr Normalize kFashionMNISTNormalize{0.2860, 0.3530};

class MNIST : public TensorDataset {
 public:
  explicit MNIST(const std::string& root, bool train = true, std::optional<Normalize> normalize = {});

 protected:
  // missing_hint ends the error for a missing file (where to get the files).
  MNIST(const std::string& root, bool train, std::optional<Normalize> normalize, const char* missing_hint);

 private:
  explicit MNIST(std::pair<Tensor, Tensor> images_and_labels);
};

class FashionMNIST : public MNIST {
 public:
  explicit FashionMNIST(const std::string& root = kFashionMNISTRoot, bool train = true,
                        std::optional<Normalize> normalize = {});
};

}  // namespace ember::data
