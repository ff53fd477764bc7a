// safetensors: round trips of every dtype and odd shapes, a fixture written
// by an independent writer (fixtures/make_tiny.py), the exact bytes ember
// writes, atomic writes, and every kind of corrupt file.
#include "ember/nn/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <zlib.h>

#include "ember/ember.h"
#include "ember/nn/json.h"
#include "support/error_message.h"

namespace ember {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using ::testing::HasSubstr;

// A fresh directory per test, removed afterwards.
class SafetensorsFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ember_safetensors_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  fs::path dir_;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_file(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// A file image: the 8-byte little-endian length, the header, the data.
std::string image(const std::string& header, const std::string& data = "", uint64_t length = UINT64_MAX) {
  uint64_t n = length == UINT64_MAX ? header.size() : length;
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

std::string parse_error(const std::string& bytes) {
  return error_of([&] { parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()); });
}

TEST_F(SafetensorsFiles, RoundTripOfEveryDtypeAndOddShapes) {
  Generator g(5);
  std::map<std::string, Tensor> tensors;
  const Shape shapes[] = {{3, 5}, {}, {0}, {2, 0, 3}, {1, 1, 7}, {4, 3, 2}};
  const DType dtypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16,
                          DType::Int32,   DType::Int64,   DType::Bool};
  for (DType dt : dtypes) {
    for (size_t s = 0; s < std::size(shapes); ++s) {
      Tensor t = randn(shapes[s], DType::Float32, kCPU, &g) * 100.0;
      t = dt == DType::Bool ? gt(t, 0.0) : t.to(dt);
      tensors[std::string(dtype_name(dt)) + "/" + std::to_string(s)] = t;
    }
  }
  // Non-contiguous and offset views are written densely.
  Tensor base = arange(0, 24, 1, DType::Float64).reshape({4, 6});
  tensors["view.transposed"] = base.t();
  tensors["view.narrowed"] = base.narrow(1, 2, 3);
  tensors["name with \"quotes\", \\ and \xc3\xa9"] = ones({2}, DType::Int64);
  const std::map<std::string, std::string> metadata = {{"epoch", "3"}, {"note", "line\nbreak \"quoted\" \t tab"}};
  save_safetensors(path("all.safetensors"), tensors, metadata);
  SafetensorsContents back = load_safetensors(path("all.safetensors"));
  EXPECT_EQ(back.metadata, metadata);
  ASSERT_EQ(back.tensors.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(back.tensors.count(name));
    const Tensor& u = back.tensors.at(name);
    EXPECT_EQ(u.shape(), t.shape());
    EXPECT_EQ(u.dtype(), t.dtype());
    EXPECT_TRUE(u.is_contiguous());
    EXPECT_TRUE(equal(u, t));
  }
  // The in-memory reader sees the same file.
  const std::string bytes = read_file(path("all.safetensors"));
  SafetensorsContents mem = parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  EXPECT_EQ(mem.tensors.size(), tensors.size());
  EXPECT_TRUE(equal(mem.tensors.at("view.transposed"), base.t()));
}

std::string crc_hex(const std::string& bytes) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08lx", crc32(0, reinterpret_cast<const Bytef*>(bytes.data()), uInt(bytes.size())));
  return buf;
}

TEST_F(SafetensorsFiles, WritesTheExactFormat) {
  save_safetensors(path("a.safetensors"), {{"b", from_vector<int32_t>({1, -2})}, {"a", from_vector<double>({0.5})}},
                   {{"k", "v"}});
  std::string data(16, '\0');
  const double a = 0.5;
  const int32_t b[2] = {1, -2};
  std::memcpy(data.data(), &a, 8);
  std::memcpy(data.data() + 8, b, 8);
  // The checksums as ember/nn/safetensors.h defines them, from zlib here.
  const std::string crc_a = crc_hex(data.substr(0, 8)), crc_b = crc_hex(data.substr(8));
  const std::string digest = R"("ember.checksum":"crc32")"
                             "\n"
                             R"("ember.checksum.tensor.a":")" +
                             crc_a + "\"\n" + R"("ember.checksum.tensor.b":")" + crc_b + "\"\n" +
                             R"("k":"v")"
                             "\n"
                             R"("a":F64[1])"
                             "\n"
                             R"("b":I32[2])"
                             "\n";
  const std::string header = R"({"__metadata__":{"ember.checksum":"crc32","ember.checksum.header":")" +
                             crc_hex(digest) + R"(","ember.checksum.tensor.a":")" + crc_a +
                             R"(","ember.checksum.tensor.b":")" + crc_b + R"(","k":"v"},)" +
                             R"("a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"I32","shape":[2],"data_offsets":[8,16]}})";
  std::string padded = header + std::string((8 - header.size() % 8) % 8, ' ');
  EXPECT_EQ(read_file(path("a.safetensors")), image(padded, data));
}

// A small checkpoint of every dtype, as a file image.
std::string small_checkpoint(const std::string& file) {
  Generator g(3);
  std::map<std::string, Tensor> tensors = {{"0.weight", randn({3, 2}, DType::Float32, kCPU, &g)},
                                           {"0.bias", randn({3}, DType::Float64, kCPU, &g)},
                                           {"1.running_mean", randn({2}, DType::Float32, kCPU, &g).to(DType::BFloat16)},
                                           {"1.running_var", randn({2}, DType::Float32, kCPU, &g).to(DType::Float16)},
                                           {"1.num_batches_tracked", full({}, 7.0, DType::Int64)},
                                           {"mask", gt(randn({3}, DType::Float32, kCPU, &g), 0.0)},
                                           {"idx", from_vector<int32_t>({4, -1})}};
  save_safetensors(file, tensors, {{"note", "a b"}});
  return read_file(file);
}

uint64_t header_length(const std::string& bytes) {
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  return n;
}

bool same_contents(const SafetensorsContents& a, const SafetensorsContents& b) {
  if (a.metadata != b.metadata || a.tensors.size() != b.tensors.size()) return false;
  for (const auto& [name, t] : a.tensors) {
    auto it = b.tensors.find(name);
    if (it == b.tensors.end() || it->second.dtype() != t.dtype() || it->second.shape() != t.shape()) return false;
    if (std::memcmp(it->second.data_ptr(), t.data_ptr(), size_t(t.numel()) * t.element_size()) != 0) return false;
  }
  return true;
}

TEST_F(SafetensorsFiles, EveryFlippedDataByteIsAnErrorNamingTheFileAndTensor) {
  const std::string original = small_checkpoint(path("good.safetensors"));
  const SafetensorsContents good = load_safetensors(path("good.safetensors"));
  const uint64_t data_begin = 8 + header_length(original);
  ASSERT_LT(data_begin, original.size());
  // Which tensor owns each data byte, from the header's offsets.
  json::Value header = json::parse(std::string_view(original).substr(8, data_begin - 8));
  std::vector<std::string> owner(original.size() - data_begin);
  for (const auto& [name, entry] : header.object) {
    if (name == "__metadata__") continue;
    const json::Value* offsets = entry.find("data_offsets");
    for (uint64_t i = *offsets->array[0].as_uint64(); i < *offsets->array[1].as_uint64(); ++i) owner[i] = name;
  }
  const std::string file = path("flipped.safetensors");
  for (uint64_t at = data_begin; at < original.size(); ++at) {
    for (uint8_t mask : {0x01, 0x80, 0xff}) {
      std::string bytes = original;
      bytes[at] = char(uint8_t(bytes[at]) ^ mask);
      write_file(file, bytes);
      const std::string name = owner[at - data_begin];
      SCOPED_TRACE("byte " + std::to_string(at) + " of tensor " + name + " ^ " + std::to_string(mask));
      EXPECT_THAT(
          error_of([&] { load_safetensors(file); }),
          HasSubstr("load_safetensors: " + file + ": tensor \"" + name + "\": its data does not match its checksum"));
      EXPECT_THAT(parse_error(bytes), HasSubstr("tensor \"" + name + "\": its data does not match its checksum"));
    }
  }
}

// Every header byte (the length field included) with several flips: each
// is an error, except a padding space turned into other JSON whitespace,
// which loads the very same contents (ember/nn/safetensors.h documents this).
TEST_F(SafetensorsFiles, EveryFlippedHeaderByteIsAnErrorOrTheSameContents) {
  const std::string original = small_checkpoint(path("good.safetensors"));
  const SafetensorsContents good = load_safetensors(path("good.safetensors"));
  const uint64_t data_begin = 8 + header_length(original);
  const uint64_t json_end = original.rfind('}', data_begin - 1) + 1;  // padding after
  int harmless = 0;
  for (uint64_t at = 0; at < data_begin; ++at) {
    for (int mask : {0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80, 0xff, 0x2a, 0x29}) {
      std::string bytes = original;
      bytes[at] = char(uint8_t(bytes[at]) ^ mask);
      SCOPED_TRACE("byte " + std::to_string(at) + " ^ " + std::to_string(mask));
      try {
        SafetensorsContents got = parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
        EXPECT_GE(at, json_end) << "a flip inside the JSON loaded";
        EXPECT_TRUE(std::strchr("\t\n\r", bytes[at]) != nullptr) << "padding became " << int(bytes[at]);
        EXPECT_TRUE(same_contents(got, good));
        ++harmless;
      } catch (const Error& e) {
        if (at >= 8 && at < json_end) {
          // Inside the JSON, the checksum (or the format) names the problem.
          EXPECT_THAT(e.what(), HasSubstr("parse_safetensors: <memory>: "));
        }
      }
    }
  }
  // 0x20 ^ 0x29 = '\t', ^ 0x2a = '\n': each padding byte has two harmless flips.
  EXPECT_EQ(harmless, 2 * int(data_begin - json_end));
}

TEST_F(SafetensorsFiles, HeaderChecksumErrorsSayHeader) {
  small_checkpoint(path("good.safetensors"));
  std::string bytes = read_file(path("good.safetensors"));
  // A tensor renamed in place ("idx" -> "idy") keeps the JSON valid.
  const size_t at = bytes.find("\"idx\":{");
  ASSERT_NE(at, std::string::npos);
  bytes[at + 3] = 'y';
  write_file(path("bad.safetensors"), bytes);
  EXPECT_THAT(
      error_of([&] { load_safetensors(path("bad.safetensors")); }),
      HasSubstr("load_safetensors: " + path("bad.safetensors") + ": header: it does not match its checksum (stored "));
}

TEST_F(SafetensorsFiles, ChecksumKeysAreReservedAndHidden) {
  EXPECT_THAT(error_of([&] {
                save_safetensors(path("x.safetensors"), {}, {{"ember.checksum.mine", "1"}});
              }),
              HasSubstr("metadata \"ember.checksum.mine\": keys starting with \"ember.checksum\" are reserved"));
  save_safetensors(path("empty.safetensors"), {}, {});
  EXPECT_TRUE(load_safetensors(path("empty.safetensors")).metadata.empty());
}

TEST_F(SafetensorsFiles, ReadsAFileFromAnIndependentWriter) {
  const std::string fixture = (fs::path(EMBER_TESTS_DIR) / "nn" / "fixtures" / "tiny.safetensors").string();
  SafetensorsContents f = load_safetensors(fixture);
  EXPECT_EQ(f.metadata,
            (std::map<std::string, std::string>{{"format", "pt"}, {"note", "written by make_tiny.py \xc3\xa9"}}));
  ASSERT_EQ(f.tensors.size(), 8u);
  const Tensor& w = f.tensors.at("weight");
  EXPECT_EQ(w.shape(), (Shape{2, 3}));
  EXPECT_EQ(to_vector<float>(w), (std::vector<float>{0.0f, 0.5f, 1.0f, 1.5f, 2.0f, -2.5f}));
  EXPECT_EQ(f.tensors.at("mask").dtype(), DType::Bool);
  EXPECT_EQ(to_vector<int32_t>(f.tensors.at("mask")), (std::vector<int32_t>{1, 0, 1}));
  EXPECT_EQ(to_vector<double>(f.tensors.at("bias")), (std::vector<double>{1.5, -2.25, 1e-3}));
  EXPECT_EQ(f.tensors.at("half").dtype(), DType::Float16);
  EXPECT_EQ(to_vector<double>(f.tensors.at("half")), (std::vector<double>{1.0, -2.0}));
  EXPECT_EQ(f.tensors.at("bf").shape(), (Shape{2, 1}));
  EXPECT_EQ(to_vector<double>(f.tensors.at("bf")), (std::vector<double>{1.0, 0.5}));
  EXPECT_EQ(to_vector<int64_t>(f.tensors.at("ids")), (std::vector<int64_t>{1, -2, 3, int64_t(1) << 40}));
  EXPECT_EQ(f.tensors.at("count").dim(), 0);
  EXPECT_EQ(f.tensors.at("count").item<int32_t>(), 7);
  EXPECT_EQ(f.tensors.at("empty").shape(), (Shape{0, 4}));
}

// fixtures/checksummed.safetensors was written by ember's save_safetensors:
// a reader that computes the checksums differently fails here (and the
// fuzzer starts from a file that has them).
TEST(SafetensorsParse, ReadsTheChecksummedFixture) {
  SafetensorsContents f =
      load_safetensors((fs::path(EMBER_TESTS_DIR) / "nn" / "fixtures" / "checksummed.safetensors").string());
  EXPECT_EQ(f.metadata,
            (std::map<std::string, std::string>{{"note", "written by ember's save_safetensors, with its checksums"}}));
  EXPECT_TRUE(equal(f.tensors.at("0.weight"), from_vector<float>({0.5f, -1.f, 2.f, 0.25f}).reshape({2, 2})));
  EXPECT_TRUE(equal(f.tensors.at("1.running_mean"), from_vector<float>({0.f, 1.f}).to(DType::BFloat16)));
  EXPECT_EQ(f.tensors.at("1.num_batches_tracked").item<int64_t>(), 3);
}

TEST_F(SafetensorsFiles, AtomicWriteLeavesNoTemporaryFile) {
  save_safetensors(path("m.safetensors"), {{"x", ones({3})}});
  save_safetensors(path("m.safetensors"), {{"y", zeros({2})}});  // replaces the file
  EXPECT_EQ(listing(), (std::vector<std::string>{"m.safetensors"}));
  EXPECT_EQ(load_safetensors(path("m.safetensors")).tensors.count("y"), 1u);
  EXPECT_EQ(fs::status(path("m.safetensors")).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read);
  // A failed save leaves neither a file nor a temporary one.
  EXPECT_THAT(error_of([&] {
                save_safetensors(path("bad.safetensors"), {{"__metadata__", ones({1})}});
              }),
              HasSubstr("\"__metadata__\" is reserved"));
  EXPECT_THAT(error_of([&] {
                save_safetensors(path("bad.safetensors"), {{"bad\xff", ones({1})}});
              }),
              HasSubstr("a tensor name is not valid UTF-8"));
  EXPECT_EQ(listing(), (std::vector<std::string>{"m.safetensors"}));
  const std::string missing = path("no/such/dir/x.safetensors");
  EXPECT_THAT(error_of([&] {
                save_safetensors(missing, {{"x", ones({1})}});
              }),
              HasSubstr("cannot write " + missing + ": creating a temporary file in " + path("no/such/dir")));
}

TEST_F(SafetensorsFiles, TruncatedAndMissingFilesNameThePath) {
  const std::string p = path("t.safetensors");
  save_safetensors(p, {{"x", ones({100})}});
  const uintmax_t full = fs::file_size(p);
  fs::resize_file(p, full - 10);
  EXPECT_THAT(error_of([&] { load_safetensors(p); }),
              HasSubstr("load_safetensors: " + p +
                        ": tensor \"x\": data_offsets [0, 400] go beyond the 390-byte "
                        "data section (truncated file?)"));
  fs::resize_file(p, 20);
  EXPECT_THAT(error_of([&] { load_safetensors(p); }),
              HasSubstr("load_safetensors: " + p + ": the header length 176 is more than the 12 bytes that follow"));
  fs::resize_file(p, 5);
  EXPECT_THAT(error_of([&] { load_safetensors(p); }),
              HasSubstr("the file is too short (5 bytes) to hold the 8-byte header length"));
  EXPECT_THAT(error_of([&] { load_safetensors(path("absent.safetensors")); }),
              HasSubstr("load_safetensors: " + path("absent.safetensors") + ": cannot open the file: No such file"));
  EXPECT_THAT(error_of([&] { load_safetensors(dir_.string()); }), HasSubstr("not a regular file"));
}

TEST(SafetensorsParse, CorruptHeadersAreClearErrors) {
  const std::string f32x2 = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string eight(8, '\0');
  ASSERT_EQ(parse_safetensors(reinterpret_cast<const uint8_t*>(image(f32x2, eight).data()), 8 + f32x2.size() + 8)
                .tensors.size(),
            1u);
  struct Case {
    std::string bytes;
    std::string message;
  };
  const Case cases[] = {
      {"abc", "parse_safetensors: <memory>: the file is too short (3 bytes)"},
      {image("{}", "", 1000), "the header length 1000 is more than the 2 bytes that follow the length field"},
      {image("{}", "", uint64_t(1) << 40), "the header length 1099511627776 is above the 100000000-byte limit"},
      {image("{\"t\": "), "the header is not valid JSON: unexpected end of input, expected a value at byte 6"},
      {image("not json"), "the header is not valid JSON: unexpected character, expected a value at byte 0"},
      {image("[1, 2]"), "the header must be a JSON object, but is a array"},
      {image(R"({"t":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", "ab"),
       "tensor \"t\" has an unknown or unsupported dtype \"F8_E4M3\" (supported: F32, F64, F16, BF16, I32, I64, BOOL)"},
      {image(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
       "tensor \"t\": shape [3] of F32 needs 12 bytes, but data_offsets [0, 8] hold 8"},
      {image(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "1234"),
       "tensor \"t\": data_offsets [0, 8] go beyond the 4-byte data section"},
      {image(
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
           eight),
       "tensors \"a\" [0, 8) and \"b\" [4, 8) overlap"},
      {image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight),
       "bytes [0, 4) of the data section belong to no tensor"},
      {image(f32x2, eight + "xy"), "the data section has 10 bytes but the tensors cover only 8"},
      {image(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", eight), "end before they begin"},
      {image(R"({"t":{"dtype":"F32","shape":[2]}})", eight), "tensor \"t\" lacks \"data_offsets\""},
      {image(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1}})", eight),
       "tensor \"t\" has an unknown field \"extra\""},
      {image(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight),
       "tensor \"t\": shape entries must be non-negative integers"},
      {image(R"({"t":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", eight),
       "shape entries must be non-negative integers"},
      {image(R"({"t":{"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})"),
       "tensor \"t\": shape is too large"},
      {image(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,99999999999999999999]}})", eight),
       "data_offsets must be non-negative integers"},
      {image(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", eight),
       "data_offsets must be an array [begin, end]"},
      {image(
           R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
           eight),
       "duplicate key \"t\""},
      {image(R"({"__metadata__":{"epoch":3}})"), "metadata \"epoch\" must be a string, but is a number"},
      {image(R"({"__metadata__":[]})"), "\"__metadata__\" must be an object of strings, but is a array"},
      {image(R"({"t":[]})"), "tensor \"t\" must be an object, but is a array"},
      {image(R"({"m":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", std::string("\x01\x02", 2)),
       "tensor \"m\" is BOOL but its byte 1 is 2, not 0 or 1"},
      {image("{\"t\xff\":{}}"), "invalid UTF-8 at byte 3"},
      {image("{}  x"), "unexpected data after the JSON value at byte 4"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    EXPECT_THAT(parse_error(c.bytes), HasSubstr(c.message));
  }
}

TEST(SafetensorsParse, EmptyFileAndPaddedHeader) {
  SafetensorsContents empty = parse_safetensors(reinterpret_cast<const uint8_t*>(image("{}").data()), 10);
  EXPECT_TRUE(empty.tensors.empty());
  const std::string padded = image("{\"__metadata__\":{}}     \n\t ");
  EXPECT_TRUE(parse_safetensors(reinterpret_cast<const uint8_t*>(padded.data()), padded.size()).metadata.empty());
}

}  // namespace
}  // namespace ember
