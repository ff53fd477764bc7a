// nn::save / nn::load: PyTorch's state-dict names and dtypes in the file, a
// round trip, floating files of other dtypes, and errors that name the file,
// the key and what was expected and found.
#include "ember/nn/serialize.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "ember/ember.h"
#include "examples/train/models.h"
#include "support/error_message.h"
#include "support/temp_dir.h"

namespace ember {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using ::testing::HasSubstr;

using SerializeFiles = testing::TempDirTest;

TEST_F(SerializeFiles, WritesPyTorchsStateDictNamesAndDtypes) {
  manual_seed(0);
  auto cnn = train::make_cnn(0.25);
  nn::save(*cnn, path("cnn.safetensors"), {{"epoch", "3"}});
  SafetensorsContents file = load_safetensors(path("cnn.safetensors"));
  // torch.nn.Sequential of the same layers: its state_dict().keys().
  std::vector<std::string> keys;
  for (const auto& [name, t] : file.tensors) keys.push_back(name);
  const std::vector<std::string> torch_keys = {"0.weight",
                                               "1.bias",
                                               "1.num_batches_tracked",
                                               "1.running_mean",
                                               "1.running_var",
                                               "1.weight",
                                               "12.bias",
                                               "12.weight",
                                               "4.weight",
                                               "5.bias",
                                               "5.num_batches_tracked",
                                               "5.running_mean",
                                               "5.running_var",
                                               "5.weight",
                                               "9.bias",
                                               "9.weight"};
  EXPECT_EQ(keys, torch_keys);
  EXPECT_EQ(file.metadata, (std::map<std::string, std::string>{{"epoch", "3"}}));
  EXPECT_EQ(file.tensors.at("1.num_batches_tracked").dtype(), DType::Int64);
  EXPECT_EQ(file.tensors.at("1.num_batches_tracked").shape(), Shape{});
  EXPECT_EQ(file.tensors.at("0.weight").dtype(), DType::Float32);
  EXPECT_EQ(file.tensors.at("0.weight").shape(), (Shape{32, 1, 3, 3}));
  EXPECT_EQ(file.tensors.at("9.weight").shape(), (Shape{128, 64 * 7 * 7}));
  auto mlp = train::make_mlp({256, 128}, 0.2);  // Flatten, Linear, ReLU, Dropout, ...
  nn::save(*mlp, path("mlp.safetensors"));
  std::vector<std::string> mlp_keys;
  for (const auto& [name, t] : load_safetensors(path("mlp.safetensors")).tensors) mlp_keys.push_back(name);
  EXPECT_EQ(mlp_keys, (std::vector<std::string>{"1.bias", "1.weight", "4.bias", "4.weight", "7.bias", "7.weight"}));
}

TEST_F(SerializeFiles, RoundTripAndOtherFloatingDtypes) {
  manual_seed(1);
  auto a = train::make_cnn(0.25);
  {
    NoGradGuard no_grad;
    a->state_dict().at("1.num_batches_tracked").fill_(9);
    a->state_dict().at("5.running_var").copy_(rand({64}) + 0.5);
  }
  nn::save(*a, path("a.safetensors"));
  manual_seed(2);
  auto b = train::make_cnn(0.25);
  const nn::LoadStateDictResult result = nn::load(*b, path("a.safetensors"));
  EXPECT_TRUE(result.missing_keys.empty() && result.unexpected_keys.empty());
  for (const auto& item : a->state_dict()) {
    SCOPED_TRACE(item.key);
    EXPECT_TRUE(equal(b->state_dict().at(item.key), item.value));
  }
  // A bfloat16 file (PyTorch's model.bfloat16()) loads into float32, rounded.
  auto half = nn::clone(a);
  half->to(DType::BFloat16);
  nn::save(*half, path("bf16.safetensors"));
  EXPECT_EQ(load_safetensors(path("bf16.safetensors")).tensors.at("0.weight").dtype(), DType::BFloat16);
  nn::load(*b, path("bf16.safetensors"));
  EXPECT_EQ(b->state_dict().at("0.weight").dtype(), DType::Float32);
  EXPECT_TRUE(
      equal(b->state_dict().at("0.weight"), a->state_dict().at("0.weight").to(DType::BFloat16).to(DType::Float32)));
  EXPECT_EQ(b->state_dict().at("1.num_batches_tracked").item<int64_t>(), 9);
}

TEST_F(SerializeFiles, ACorruptFileIsAnErrorNamingTheTensor) {
  auto mlp = train::make_mlp({16}, 0.0);
  nn::save(*mlp, path("mlp.safetensors"));
  const Tensor before = mlp->state_dict().at("1.weight").clone();
  std::fstream f(path("mlp.safetensors"), std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(0, std::ios::end);
  const std::streamoff last = f.tellg() - std::streamoff(1);  // the last tensor's last byte
  f.seekg(last);
  const char byte = char(f.get() ^ 0x10);
  f.seekp(last);
  f.put(byte);
  f.close();
  const std::string message = error_of([&] { nn::load(*mlp, path("mlp.safetensors")); });
  EXPECT_THAT(message, HasSubstr("load_safetensors: " + path("mlp.safetensors") + ": tensor \""));
  EXPECT_THAT(message, HasSubstr("its data does not match its checksum"));
  EXPECT_TRUE(equal(mlp->state_dict().at("1.weight"), before));
}

TEST_F(SerializeFiles, ErrorsNameTheFileTheKeyAndWhatWasExpected) {
  auto mlp = train::make_mlp({256, 128}, 0.2);
  const std::string p = path("bad.safetensors");
  save_safetensors(p, {{"1.weight", zeros({10, 784})},
                       {"1.bias", zeros({256})},
                       {"4.weight", zeros({128, 256})},
                       {"4.bias", zeros({128})},
                       {"7.weight", zeros({10, 128})},
                       {"extra", zeros({1})}});
  const std::string message = error_of([&] { nn::load(*mlp, p); });
  EXPECT_THAT(message, HasSubstr("nn::load: " + p + ": cannot load into Sequential:"));
  EXPECT_THAT(message, HasSubstr("key \"1.weight\": expected shape [256, 784], found [10, 784]"));
  EXPECT_THAT(message, HasSubstr("missing keys (in the Sequential, not in the file): \"7.bias\""));
  EXPECT_THAT(message, HasSubstr("unexpected keys (in the file, not in the Sequential): \"extra\""));
  const Tensor before = mlp->state_dict().at("4.weight").clone();
  EXPECT_TRUE(equal(mlp->state_dict().at("4.weight"), before)) << "nothing changes on an error";

  auto bn = std::make_shared<nn::BatchNorm1d>(3);
  save_safetensors(p, {{"weight", ones({3})},
                       {"bias", zeros({3})},
                       {"running_mean", zeros({3})},
                       {"running_var", ones({3})},
                       {"num_batches_tracked", zeros({}, DType::Int32)}});
  EXPECT_THAT(error_of([&] { nn::load(*bn, p); }),
              HasSubstr("key \"num_batches_tracked\": expected dtype int64, found int32 (I32)"));
  save_safetensors(p, {{"weight", ones({3}, DType::Int64)}});
  // A wrong dtype is an error even without strict.
  EXPECT_THAT(error_of([&] { nn::load(*bn, p, /*strict=*/false); }),
              HasSubstr("key \"weight\": expected dtype float32 (or another floating dtype), found int64 (I64)"));
  save_safetensors(p, {{"weight", full({3}, 2.0)}});
  const nn::LoadStateDictResult loose = nn::load(*bn, p, /*strict=*/false);
  EXPECT_EQ(loose.missing_keys.size(), 4u);
  EXPECT_EQ(bn->weight.sum().item<float>(), 6.0f);
}

}  // namespace
}  // namespace ember
