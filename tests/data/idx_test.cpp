// IDX reading: small idx1 and idx3 files written here, plain and
// gzip-compressed (zlib's deflate, and a two-member gzip file); every
// malformed-input message; MNIST-format splits; and the real Fashion-MNIST
// files of Debian's dataset-fashion-mnist package when installed, checked
// against an independent read through zlib's gzread.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ember/data/gzip.h"
#include "ember/data/idx.h"
#include "ember/data/mnist.h"
#include "ember/ember.h"
#include "support/error_message.h"

namespace ember::data {
namespace {

namespace fs = std::filesystem;
using testing::throws_with;
using Bytes = std::vector<uint8_t>;

// An IDX file of unsigned bytes: magic, big-endian sizes, data.
Bytes idx(const std::vector<uint32_t>& sizes, const Bytes& data, uint8_t type = 0x08) {
  Bytes out{0, 0, type, uint8_t(sizes.size())};
  for (uint32_t s : sizes) {
    for (int shift : {24, 16, 8, 0}) out.push_back(uint8_t(s >> shift));
  }
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// One gzip member holding data, written by zlib's deflate.
Bytes gzip(const Bytes& data) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, Z_BEST_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  Bytes out(deflateBound(&zs, uLong(data.size())) + 32);
  zs.next_in = const_cast<Bytef*>(data.data());
  zs.avail_in = uInt(data.size());
  zs.next_out = out.data();
  zs.avail_out = uInt(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

Bytes iota_bytes(size_t n, int step) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = uint8_t((i * size_t(step)) % 256);
  return b;
}

class IdxFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("ember_idx_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const Bytes& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    return path;
  }

  // An MNIST-format split of n images (pixel (i, r, c) = i + r + c) and
  // labels i % 10, as <prefix>-images-idx3-ubyte and -labels-idx1-ubyte.
  void write_split(const std::string& prefix, uint32_t n, bool compress) {
    Bytes pixels, labels;
    for (uint32_t i = 0; i < n; ++i) {
      for (int r = 0; r < 28; ++r) {
        for (int c = 0; c < 28; ++c) pixels.push_back(uint8_t(i + r + c));
      }
      labels.push_back(uint8_t(i % 10));
    }
    Bytes images = idx({n, 28, 28}, pixels), label_file = idx({n}, labels);
    const std::string suffix = compress ? ".gz" : "";
    write(prefix + "-images-idx3-ubyte" + suffix, compress ? gzip(images) : images);
    write(prefix + "-labels-idx1-ubyte" + suffix, compress ? gzip(label_file) : label_file);
  }

  fs::path dir_;
};

TEST_F(IdxFiles, Idx1IsInt64LabelsPlainAndGzip) {
  const Bytes labels{3, 0, 255, 9, 128};
  for (bool compress : {false, true}) {
    Bytes file = idx({5}, labels);
    Tensor t = read_idx(write(compress ? "l.gz" : "l", compress ? gzip(file) : file));
    EXPECT_EQ(t.dtype(), DType::Int64);
    EXPECT_EQ(t.shape(), (Shape{5}));
    EXPECT_EQ(to_vector<int64_t>(t), (std::vector<int64_t>{3, 0, 255, 9, 128}));
  }
}

TEST_F(IdxFiles, Idx3IsFloatPixelsOver255PlainAndGzip) {
  const Bytes pixels = iota_bytes(2 * 3 * 4, 37);
  for (bool compress : {false, true}) {
    Bytes file = idx({2, 3, 4}, pixels);
    Tensor t = read_idx(write("i", compress ? gzip(file) : file));
    EXPECT_EQ(t.dtype(), DType::Float32);
    EXPECT_EQ(t.shape(), (Shape{2, 3, 4}));
    std::vector<float> v = to_vector<float>(t);
    for (size_t i = 0; i < pixels.size(); ++i) EXPECT_EQ(v[i], float(pixels[i]) / 255.0f) << i;
  }
  const Bytes extremes = idx({1, 2}, {0, 255});
  EXPECT_EQ(to_vector<float>(parse_idx(extremes.data(), extremes.size())), (std::vector<float>{0.0f, 1.0f}));
}

TEST_F(IdxFiles, ConcatenatedGzipMembersAndEmptySizes) {
  Bytes file = idx({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  Bytes first(file.begin(), file.begin() + 11), second(file.begin() + 11, file.end());
  Bytes two = gzip(first), tail = gzip(second);
  two.insert(two.end(), tail.begin(), tail.end());
  EXPECT_TRUE(equal(parse_idx(two.data(), two.size()), parse_idx(file.data(), file.size())));
  const Bytes no_images = idx({0, 28, 28}, {});
  Tensor empty_idx = parse_idx(no_images.data(), no_images.size());
  EXPECT_EQ(empty_idx.shape(), (Shape{0, 28, 28}));
}

TEST_F(IdxFiles, MalformedHeaders) {
  const std::string bad_magic = write("bad_magic", {1, 2, 8, 1, 0, 0, 0, 0});
  EXPECT_TRUE(
      throws_with([&] { read_idx(bad_magic); }, {"read_idx", bad_magic, "bad magic 0x01020801", "not an IDX file"}));
  const Bytes floats = idx({1}, {0, 0, 0, 0}, 0x0D);
  EXPECT_TRUE(throws_with([&] { parse_idx(floats.data(), floats.size(), "f.idx"); },
                          {"f.idx", "element type 0xd (float32) is not supported", "unsigned bytes (type 0x08)"}));
  const Bytes rank0{0, 0, 8, 0, 7};
  EXPECT_TRUE(throws_with([&] { parse_idx(rank0.data(), rank0.size()); }, {"<memory>", "rank 0"}));
  const Bytes short_header{0, 0, 8, 3, 0, 0, 0, 2};
  EXPECT_TRUE(throws_with([&] { parse_idx(short_header.data(), short_header.size()); },
                          {"truncated header", "rank 3 needs 16 bytes", "has 8"}));
  const Bytes tiny{0, 0};
  EXPECT_TRUE(throws_with([&] { parse_idx(tiny.data(), tiny.size()); }, {"2 bytes is too short"}));
}

TEST_F(IdxFiles, MalformedData) {
  const std::string truncated = write("truncated", idx({2, 3, 3}, iota_bytes(10, 1)));
  EXPECT_TRUE(throws_with([&] { read_idx(truncated); },
                          {truncated, "truncated data", "[2, 3, 3]", "need 18 bytes but only 10"}));
  const Bytes trailing = idx({2}, {1, 2, 3, 4});
  EXPECT_TRUE(throws_with([&] { parse_idx(trailing.data(), trailing.size()); },
                          {"2 bytes after the data", "[2] need 2 bytes, 4 follow"}));
  const Bytes huge = idx({0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}, {1});
  EXPECT_TRUE(throws_with([&] { parse_idx(huge.data(), huge.size()); }, {"truncated data", "more than 2^63"}));
  // No element, but strides past int64 (found by fuzz/idx_fuzz.cpp).
  const Bytes empty_but_huge = idx({0, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}, {});
  EXPECT_TRUE(throws_with([&] { parse_idx(empty_but_huge.data(), empty_but_huge.size()); },
                          {"[0, 4294967295, 4294967295, 4294967295] hold no element", "past 2^63"}));
}

TEST_F(IdxFiles, MalformedGzip) {
  const Bytes good = gzip(idx({3}, {1, 2, 3}));
  Bytes cut(good.begin(), good.end() - 6);
  const std::string cut_path = write("cut.gz", cut);
  EXPECT_TRUE(throws_with([&] { read_idx(cut_path); }, {"gunzip", cut_path, "truncated"}));
  Bytes bad_crc = good;
  bad_crc[bad_crc.size() - 8] ^= 0xFF;  // the trailer's CRC-32
  EXPECT_TRUE(throws_with([&] { parse_idx(bad_crc.data(), bad_crc.size(), "crc.gz"); },
                          {"crc.gz", "corrupt gzip data", "incorrect data check"}));
  Bytes junk = good;
  junk.insert(junk.end(), {'x', 'y', 'z'});
  EXPECT_TRUE(throws_with([&] { parse_idx(junk.data(), junk.size()); },
                          {"3 bytes after the end of the gzip stream", "not another gzip member"}));
  Bytes bad_header = good;
  bad_header[2] = 7;  // compression method other than deflate
  EXPECT_TRUE(throws_with([&] { parse_idx(bad_header.data(), bad_header.size()); }, {"corrupt gzip data"}));
}

TEST_F(IdxFiles, MissingFile) {
  const std::string path = (dir_ / "nope.gz").string();
  EXPECT_TRUE(throws_with([&] { read_idx(path); }, {"read_idx: cannot read", path, "No such file"}));
  EXPECT_TRUE(throws_with([&] { read_idx(dir_.string()); }, {"cannot read", dir_.string()}));
}

TEST_F(IdxFiles, MnistSplits) {
  write_split("train", 12, true);
  write_split("t10k", 3, false);
  MNIST train(dir_.string());
  EXPECT_EQ(train.size(), 12);
  EXPECT_EQ(train.inputs().shape(), (Shape{12, 1, 28, 28}));
  EXPECT_EQ(train.targets().dtype(), DType::Int64);
  Example ex = train.get(11);
  EXPECT_EQ(ex.target.item<int64_t>(), 1);
  EXPECT_EQ(ex.input.select(0, 0).select(0, 2).select(0, 5).item<float>(), float(11 + 2 + 5) / 255.0f);
  MNIST test(dir_.string(), false, Normalize{0.5, 0.25});
  EXPECT_EQ(test.size(), 3);
  EXPECT_FLOAT_EQ(test.get(2).input.select(0, 0).select(0, 1).select(0, 1).item<float>(),
                  (float(2 + 1 + 1) / 255.0f - 0.5f) / 0.25f);
}

TEST_F(IdxFiles, MnistErrors) {
  EXPECT_TRUE(throws_with([&] { MNIST m(dir_.string()); },
                          {"MNIST: neither", "train-images-idx3-ubyte.gz", "nor", "download MNIST"}));
  EXPECT_TRUE(throws_with([&] { FashionMNIST m(dir_.string(), false); },
                          {"t10k-images-idx3-ubyte", "apt-get install dataset-fashion-mnist"}));
  write("train-images-idx3-ubyte", idx({2, 28, 27}, Bytes(2 * 28 * 27)));
  write("train-labels-idx1-ubyte", idx({2}, {0, 1}));
  EXPECT_TRUE(throws_with([&] { MNIST m(dir_.string()); }, {"train-images-idx3-ubyte", "[2, 28, 27]", "(N, 28, 28)"}));
  write("train-images-idx3-ubyte", idx({2, 28, 28}, Bytes(2 * 28 * 28)));
  write("train-labels-idx1-ubyte", idx({3}, {0, 1, 2}));
  EXPECT_TRUE(throws_with([&] { MNIST m(dir_.string()); }, {"has 2 images", "has 3 labels"}));
  write("train-labels-idx1-ubyte", idx({2}, {0, 10}));
  EXPECT_TRUE(throws_with([&] { MNIST m(dir_.string()); }, {"label 1 is 10", "0 .. 9"}));
  write("train-labels-idx1-ubyte", idx({2}, {0, 1}));
  EXPECT_TRUE(throws_with([&] { MNIST m(dir_.string(), true, Normalize{0, 0}); }, {"std must be positive"}));
}

// ---------------- the real Fashion-MNIST ----------------

bool fashion_mnist_installed() {
  return fs::exists(fs::path(kFashionMNISTRoot) / "train-images-idx3-ubyte.gz") &&
         fs::exists(fs::path(kFashionMNISTRoot) / "t10k-labels-idx1-ubyte.gz");
}

// The first `n` bytes of a gzip file, read by zlib's gzread.
Bytes gzread_prefix(const std::string& path, size_t n) {
  Bytes out(n);
  gzFile f = gzopen(path.c_str(), "rb");
  EXPECT_NE(f, nullptr) << path;
  EXPECT_EQ(gzread(f, out.data(), unsigned(n)), int(n));
  gzclose(f);
  return out;
}

TEST(FashionMNIST, RealFiles) {
  if (!fashion_mnist_installed()) {
    GTEST_SKIP() << "Fashion-MNIST is not in " << kFashionMNISTRoot
                 << " (apt-get install dataset-fashion-mnist to run this test)";
  }
  FashionMNIST train;
  FashionMNIST test(kFashionMNISTRoot, false);
  ASSERT_EQ(train.inputs().shape(), (Shape{60000, 1, 28, 28}));
  ASSERT_EQ(test.inputs().shape(), (Shape{10000, 1, 28, 28}));
  EXPECT_EQ(test.targets().shape(), (Shape{10000}));

  // Every label against gzread's bytes; every class has 6000 train images.
  const std::string root = kFashionMNISTRoot;
  const Bytes raw_labels = gzread_prefix(root + "/train-labels-idx1-ubyte.gz", 8 + 60000);
  std::vector<int64_t> labels = to_vector<int64_t>(train.targets());
  std::vector<int> per_class(10);
  for (size_t i = 0; i < labels.size(); ++i) {
    ASSERT_EQ(labels[i], raw_labels[8 + i]) << i;
    ASSERT_TRUE(labels[i] >= 0 && labels[i] <= 9);
    ++per_class[size_t(labels[i])];
  }
  EXPECT_EQ(per_class, std::vector<int>(10, 6000));
  EXPECT_EQ(to_vector<int64_t>(test.targets().narrow(0, 0, 4)), (std::vector<int64_t>{9, 2, 1, 1}));

  // The first two test images against gzread's bytes.
  const Bytes raw_images = gzread_prefix(root + "/t10k-images-idx3-ubyte.gz", 16 + 2 * 784);
  std::vector<float> pixels = to_vector<float>(test.inputs().narrow(0, 0, 2));
  for (size_t i = 0; i < pixels.size(); ++i) ASSERT_EQ(pixels[i], float(raw_images[16 + i]) / 255.0f) << i;

  // kFashionMNISTNormalize is the training set's mean and std (a plain
  // float64 loop, not ember's reductions: 47 million pixels).
  const float* p = train.inputs().data<float>();
  const int64_t count = train.inputs().numel();
  double sum = 0, sum_sq = 0;
  float lo = 1, hi = 0;
  for (int64_t i = 0; i < count; ++i) {
    sum += p[i];
    sum_sq += double(p[i]) * p[i];
    lo = std::min(lo, p[i]);
    hi = std::max(hi, p[i]);
  }
  const double mean = sum / double(count);
  EXPECT_NEAR(mean, kFashionMNISTNormalize.mean, 1e-4);
  EXPECT_NEAR(std::sqrt(sum_sq / double(count) - mean * mean), kFashionMNISTNormalize.std, 1e-4);
  EXPECT_EQ(lo, 0.0f);
  EXPECT_EQ(hi, 1.0f);

  FashionMNIST normalized(kFashionMNISTRoot, false, kFashionMNISTNormalize);
  const float plain = test.inputs().select(0, 0).select(0, 0).select(0, 14).select(0, 14).item<float>();
  const float scaled = normalized.inputs().select(0, 0).select(0, 0).select(0, 14).select(0, 14).item<float>();
  EXPECT_FLOAT_EQ(scaled, float((plain - kFashionMNISTNormalize.mean) / kFashionMNISTNormalize.std));
}

}  // namespace
}  // namespace ember::data
