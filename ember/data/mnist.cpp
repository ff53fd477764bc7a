// MNIST-format splits: find the files, read them, check and shape them.
#include "ember/data/mnist.h"

#include <filesystem>

#include "ember/core/error.h"
#include "ember/core/ops.h"
#include "ember/data/idx.h"

namespace ember::data {
namespace {

constexpr int64_t kSide = 28;
constexpr int64_t kClasses = 10;

// <root>/<name>.gz if it exists, else <root>/<name>.
std::string find_file(const std::string& root, const std::string& name, const char* missing_hint) {
  const std::filesystem::path base = std::filesystem::path(root) / name;
  const std::string gz = base.string() + ".gz";
  if (std::filesystem::exists(gz)) return gz;
  EMBER_CHECK(std::filesystem::exists(base),
              "MNIST: neither " << gz << " nor " << base.string() << " exists; " << missing_hint);
  return base.string();
}

std::pair<Tensor, Tensor> load(const std::string& root, bool train, std::optional<Normalize> normalize,
                               const char* missing_hint) {
  const std::string prefix = train ? "train" : "t10k";
  const std::string images_path = find_file(root, prefix + "-images-idx3-ubyte", missing_hint);
  const std::string labels_path = find_file(root, prefix + "-labels-idx1-ubyte", missing_hint);
  Tensor images = read_idx(images_path);
  Tensor labels = read_idx(labels_path);
  EMBER_CHECK(images.dim() == 3 && images.size(1) == kSide && images.size(2) == kSide,
              "MNIST: " << images_path << " holds sizes " << shape_str(images.shape()) << "; MNIST images are (N, "
                        << kSide << ", " << kSide << ")");
  EMBER_CHECK(labels.dim() == 1,
              "MNIST: " << labels_path << " holds sizes " << shape_str(labels.shape()) << "; MNIST labels are (N)");
  EMBER_CHECK(images.size(0) == labels.size(0), "MNIST: " << images_path << " has " << images.size(0) << " images but "
                                                          << labels_path << " has " << labels.size(0) << " labels");
  const int64_t* label = labels.data<int64_t>();
  for (int64_t i = 0; i < labels.numel(); ++i) {
    EMBER_CHECK(label[i] < kClasses, "MNIST: " << labels_path << ": label " << i << " is " << label[i]
                                               << "; MNIST labels are 0 .. " << kClasses - 1);
  }
  images = images.view({images.size(0), 1, kSide, kSide});
  if (normalize) {
    EMBER_CHECK(normalize->std > 0, "MNIST: normalize std must be positive, got " << normalize->std);
    images.sub_(normalize->mean).div_(normalize->std);
  }
  return {images, labels};
}

}  // namespace

MNIST::MNIST(const std::string& root, bool train, std::optional<Normalize> normalize)
    : MNIST(root, train, normalize, "download MNIST's four files into that folder") {}

MNIST::MNIST(const std::string& root, bool train, std::optional<Normalize> normalize, const char* missing_hint)
    : MNIST(load(root, train, normalize, missing_hint)) {}

MNIST::MNIST(std::pair<Tensor, Tensor> images_and_labels)
    : TensorDataset(images_and_labels.first, images_and_labels.second) {}

FashionMNIST::FashionMNIST(const std::string& root, bool train, std::optional<Normalize> normalize)
    : MNIST(root, train, normalize,
            "Fashion-MNIST comes with Debian's package dataset-fashion-mnist (apt-get install dataset-fashion-mnist), "
            "which puts it in /usr/share/datasets/fashion-mnist") {}

}  // namespace ember::data
