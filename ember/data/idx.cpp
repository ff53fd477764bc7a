// The IDX parser: header checks, then one pass converting bytes to int64
// labels or float32 pixels in [0, 1].
#include "ember/data/idx.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <system_error>
#include <vector>

#include "ember/core/error.h"
#include "ember/data/gzip.h"

namespace ember::data {
namespace {

constexpr uint8_t kUnsignedByte = 0x08;

const char* type_name(uint8_t type) {
  switch (type) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return "unknown";
  }
}

std::string hex_magic(const uint8_t* p) {
  std::ostringstream os;
  os << "0x" << std::hex << std::setfill('0');
  for (int i = 0; i < 4; ++i) os << std::setw(2) << int(p[i]);
  return os.str();
}

uint32_t read_be32(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
}

Tensor to_tensor(const uint8_t* bytes, const Shape& shape) {
  if (shape.size() == 1) {
    Tensor labels = empty(shape, DType::Int64, kCPU);
    int64_t* out = labels.data<int64_t>();
    for (int64_t i = 0; i < shape[0]; ++i) out[i] = bytes[i];
    return labels;
  }
  Tensor images = empty(shape, DType::Float32, kCPU);
  float scaled[256];
  for (int v = 0; v < 256; ++v) scaled[v] = float(v) / 255.0f;
  float* out = images.data<float>();
  const int64_t n = images.numel();
  for (int64_t i = 0; i < n; ++i) out[i] = scaled[bytes[i]];
  return images;
}

}  // namespace

Tensor parse_idx(const uint8_t* data, size_t size, const std::string& name) {
  std::vector<uint8_t> inflated;
  if (is_gzip(data, size)) {
    inflated = gunzip(data, size, name);
    data = inflated.data();
    size = inflated.size();
  }
  EMBER_CHECK(size >= 4, "read_idx: " << name << ": " << size << " bytes is too short for an IDX file (a 4-byte magic, "
                                      << "the sizes, then the data)");
  EMBER_CHECK(data[0] == 0 && data[1] == 0,
              "read_idx: " << name << ": bad magic " << hex_magic(data) << "; an IDX file starts with two zero bytes, "
                           << "a type byte and a rank byte (0x00000803 for MNIST images); this is not an IDX file");
  const uint8_t type = data[2];
  const size_t rank = data[3];
  EMBER_CHECK(type == kUnsignedByte, "read_idx: " << name << ": element type 0x" << std::hex << int(type) << std::dec
                                                  << " (" << type_name(type) << ") is not supported; ember reads IDX "
                                                  << "files of unsigned bytes (type 0x08), as MNIST and Fashion-MNIST "
                                                  << "are");
  EMBER_CHECK(rank >= 1, "read_idx: " << name << ": rank 0 (magic " << hex_magic(data)
                                      << "); an IDX file has at least one dimension");
  const size_t header = 4 + 4 * rank;
  EMBER_CHECK(size >= header, "read_idx: " << name << ": truncated header: rank " << rank << " needs " << header
                                           << " bytes of magic and sizes, the file has " << size);
  Shape shape(rank);
  uint64_t numel = 1;
  uint64_t extent = 1;  // the product of the non-zero sizes: what the strides reach
  bool overflow = false;
  for (size_t d = 0; d < rank; ++d) {
    const uint32_t s = read_be32(data + 4 + 4 * d);
    shape[d] = int64_t(s);
    if (s == 0) continue;
    if (extent > uint64_t(INT64_MAX) / s) overflow = true;
    extent *= s;
  }
  for (int64_t s : shape) numel *= uint64_t(s);
  const size_t payload = size - header;
  EMBER_CHECK(!overflow || numel != 0, "read_idx: " << name << ": sizes " << shape_str(shape)
                                                    << " hold no element, but the non-zero ones multiply past 2^63, "
                                                    << "more than a tensor's strides can address");
  EMBER_CHECK(!overflow && numel <= payload, "read_idx: " << name << ": truncated data: sizes " << shape_str(shape)
                                                          << " need "
                                                          << (overflow ? "more than 2^63" : std::to_string(numel))
                                                          << " bytes but only " << payload << " follow the header");
  EMBER_CHECK(numel == payload, "read_idx: " << name << ": " << payload - numel << " bytes after the data: sizes "
                                             << shape_str(shape) << " need " << numel << " bytes, " << payload
                                             << " follow the header");
  return to_tensor(data + header, shape);
}

Tensor read_idx(const std::string& path) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  EMBER_CHECK(!ec, "read_idx: cannot read " << path << ": " << ec.message());
  std::vector<uint8_t> bytes(size);
  std::ifstream file(path, std::ios::binary);
  file.read(reinterpret_cast<char*>(bytes.data()), std::streamsize(size));
  EMBER_CHECK(file, "read_idx: cannot read " << path << ": " << std::strerror(errno));
  return parse_idx(bytes.data(), bytes.size(), path);
}

}  // namespace ember::data
