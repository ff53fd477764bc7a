// safetensors reading and writing (see ember/nn/safetensors.h).
//
// The reader validates the whole header against the size of the data
// section before it allocates or copies anything, so every later access is
// in bounds; the file reader then reads each tensor's bytes straight into
// its tensor.
#include "ember/nn/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <vector>

#include <zlib.h>

#include "ember/core/grad_mode.h"
#include "ember/nn/atomic_file.h"
#include "ember/nn/json.h"

namespace ember {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; ember reads and writes it as host memory");

namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // as the reference implementation

struct DTypeName {
  const char* name;
  DType dtype;
};
constexpr DTypeName kDTypes[] = {{"F32", DType::Float32},   {"F64", DType::Float64}, {"F16", DType::Float16},
                                 {"BF16", DType::BFloat16}, {"I32", DType::Int32},   {"I64", DType::Int64},
                                 {"BOOL", DType::Bool}};

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
  std::optional<uint32_t> checksum;  // from "ember.checksum.tensor.<name>"
};

struct Layout {
  std::vector<Entry> entries;
  std::map<std::string, std::string> metadata;
};

// ---- checksums (see "Checksums" in ember/nn/safetensors.h) ----
constexpr std::string_view kChecksumKey = "ember.checksum";  // the reserved prefix, and the algorithm's key
constexpr const char* kChecksumAlgorithm = "crc32";
constexpr const char* kHeaderChecksumKey = "ember.checksum.header";
constexpr std::string_view kTensorChecksumPrefix = "ember.checksum.tensor.";

bool is_checksum_key(const std::string& key) { return key.rfind(kChecksumKey, 0) == 0; }

// zlib's CRC-32 (Python's zlib.crc32), over any length.
uint32_t crc32_of(const void* data, uint64_t size) {
  return uint32_t(crc32_z(0, static_cast<const Bytef*>(data), size_t(size)));
}

std::string hex32(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

// Eight lowercase hex digits, as hex32 writes them.
std::optional<uint32_t> parse_hex32(const std::string& s) {
  if (s.size() != 8) return std::nullopt;
  uint32_t v = 0;
  for (char c : s) {
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0) return std::nullopt;
    v = v << 4 | uint32_t(digit);
  }
  return v;
}

struct TensorSummary {
  DType dtype;
  Shape shape;
};

// The header's meaning as text: one line per metadata entry (but the header
// checksum), then one per tensor, each in name order.
std::string header_digest_text(const std::map<std::string, std::string>& metadata,
                               const std::map<std::string, TensorSummary>& tensors) {
  std::string text;
  for (const auto& [key, value] : metadata) {
    if (key == kHeaderChecksumKey) continue;
    text += json::quote(key) + ":" + json::quote(value) + "\n";
  }
  for (const auto& [name, t] : tensors) {
    text += json::quote(name) + ":" + safetensors_dtype_name(t.dtype) + "[";
    for (size_t d = 0; d < t.shape.size(); ++d) text += (d ? "," : "") + std::to_string(t.shape[d]);
    text += "]\n";
  }
  return text;
}

// Throws the reader's error: "<op>: <source>: <problem>".
class Reader {
 public:
  Reader(const char* op, std::string source) : op_(op), source_(std::move(source)) {}

  template <typename... Parts>
  [[noreturn]] void fail(const Parts&... parts) const {
    std::ostringstream s;
    s << op_ << ": " << source_ << ": ";
    (s << ... << parts);
    throw Error(s.str());
  }

  // The header length from the first 8 bytes, checked against the size.
  uint64_t header_length(const uint8_t* first8, uint64_t file_size) const {
    if (file_size < 8) fail("the file is too short (", file_size, " bytes) to hold the 8-byte header length");
    uint64_t n = 0;
    std::memcpy(&n, first8, 8);
    if (n > kMaxHeaderBytes) fail("the header length ", n, " is above the ", kMaxHeaderBytes, "-byte limit");
    if (n > file_size - 8) {
      fail("the header length ", n, " is more than the ", file_size - 8,
           " bytes that follow the length field (truncated or not a safetensors file)");
    }
    return n;
  }

  Layout layout(std::string_view header, uint64_t data_size) const {
    json::Value root;
    try {
      root = json::parse(header, 16);
    } catch (const json::ParseError& e) {
      fail("the header is not valid JSON: ", e.what());
    }
    if (!root.is_object()) fail("the header must be a JSON object, but is a ", json::kind_name(root.kind));
    Layout layout;
    for (const auto& [name, value] : root.object) {
      if (name == "__metadata__") {
        read_metadata(value, layout.metadata);
      } else {
        layout.entries.push_back(entry(name, value, data_size));
      }
    }
    check_coverage(layout.entries, data_size);
    take_checksums(layout);
    return layout;
  }

  // Checks a tensor's bytes against its stored checksum, if the file has one.
  void check_data(const Entry& e, const void* bytes) const {
    if (!e.checksum) return;
    const uint32_t computed = crc32_of(bytes, e.end - e.begin);
    if (computed != *e.checksum) {
      fail("tensor \"", e.name, "\": its data does not match its checksum (stored ", hex32(*e.checksum), ", computed ",
           hex32(computed), "): the file is corrupt");
    }
  }

  // Checks a BOOL tensor's bytes are 0 or 1 (other values are not bools).
  void check_bools(const Entry& e, const uint8_t* bytes) const {
    for (uint64_t i = 0; i < e.end - e.begin; ++i) {
      if (bytes[i] > 1) fail("tensor \"", e.name, "\" is BOOL but its byte ", i, " is ", int(bytes[i]), ", not 0 or 1");
    }
  }

 private:
  void read_metadata(const json::Value& value, std::map<std::string, std::string>& out) const {
    if (!value.is_object())
      fail("\"__metadata__\" must be an object of strings, but is a ", json::kind_name(value.kind));
    for (const auto& [key, v] : value.object) {
      if (!v.is_string()) fail("metadata \"", key, "\" must be a string, but is a ", json::kind_name(v.kind));
      out[key] = v.text;
    }
  }

  Entry entry(const std::string& name, const json::Value& value, uint64_t data_size) const {
    if (!value.is_object()) fail("tensor \"", name, "\" must be an object, but is a ", json::kind_name(value.kind));
    for (const auto& [key, v] : value.object) {
      if (key != "dtype" && key != "shape" && key != "data_offsets") {
        fail("tensor \"", name, "\" has an unknown field \"", key, "\" (expected dtype, shape, data_offsets)");
      }
    }
    const json::Value* dtype = value.find("dtype");
    const json::Value* shape = value.find("shape");
    const json::Value* offsets = value.find("data_offsets");
    if (!dtype || !shape || !offsets) {
      fail("tensor \"", name, "\" lacks ", !dtype ? "\"dtype\"" : !shape ? "\"shape\"" : "\"data_offsets\"");
    }
    Entry e;
    e.name = name;
    if (!dtype->is_string()) fail("tensor \"", name, "\": dtype must be a string");
    const DTypeName* known =
        std::find_if(std::begin(kDTypes), std::end(kDTypes), [&](const DTypeName& d) { return dtype->text == d.name; });
    if (known == std::end(kDTypes)) {
      fail("tensor \"", name, "\" has an unknown or unsupported dtype \"", dtype->text,
           "\" (supported: F32, F64, F16, BF16, I32, I64, BOOL)");
    }
    e.dtype = known->dtype;
    if (!shape->is_array()) fail("tensor \"", name, "\": shape must be an array of sizes");
    int64_t numel = 1, nonzero_product = 1;
    for (const json::Value& d : shape->array) {
      const std::optional<uint64_t> size = d.as_uint64();
      if (!size || *size > uint64_t(INT64_MAX))
        fail("tensor \"", name, "\": shape entries must be non-negative integers");
      const int64_t s = int64_t(*size);
      if (__builtin_mul_overflow(nonzero_product, std::max<int64_t>(s, 1), &nonzero_product)) {
        fail("tensor \"", name, "\": shape is too large");
      }
      numel *= s;  // bounded by nonzero_product
      e.shape.push_back(s);
    }
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(uint64_t(numel), uint64_t(dtype_size(e.dtype)), &nbytes)) {
      fail("tensor \"", name, "\": shape is too large");
    }
    if (!offsets->is_array() || offsets->array.size() != 2) {
      fail("tensor \"", name, "\": data_offsets must be an array [begin, end]");
    }
    const std::optional<uint64_t> begin = offsets->array[0].as_uint64(), end = offsets->array[1].as_uint64();
    if (!begin || !end) fail("tensor \"", name, "\": data_offsets must be non-negative integers");
    e.begin = *begin;
    e.end = *end;
    if (e.end < e.begin) fail("tensor \"", name, "\": data_offsets [", e.begin, ", ", e.end, "] end before they begin");
    if (e.end > data_size) {
      fail("tensor \"", name, "\": data_offsets [", e.begin, ", ", e.end, "] go beyond the ", data_size,
           "-byte data section (truncated file?)");
    }
    if (e.end - e.begin != nbytes) {
      fail("tensor \"", name, "\": shape ", shape_str(e.shape), " of ", known->name, " needs ", nbytes,
           " bytes, but data_offsets [", e.begin, ", ", e.end, "] hold ", e.end - e.begin);
    }
    return e;
  }

  // A file with any "ember.checksum..." metadata must carry all of it and
  // match it: the header checksum first, then each tensor's key, which is
  // kept for check_data. The checksum keys leave the metadata.
  void take_checksums(Layout& layout) const {
    std::map<std::string, std::string>& meta = layout.metadata;
    if (std::none_of(meta.begin(), meta.end(), [](const auto& kv) { return is_checksum_key(kv.first); })) return;
    auto header = meta.find(kHeaderChecksumKey);
    if (header == meta.end()) fail("header: the checksum metadata lacks \"", kHeaderChecksumKey, "\" (corrupt header)");
    const std::optional<uint32_t> stored = parse_hex32(header->second);
    if (!stored)
      fail("header: \"", kHeaderChecksumKey, "\" is \"", header->second, "\", not 8 hex digits (corrupt header)");
    std::map<std::string, TensorSummary> tensors;
    for (const Entry& e : layout.entries) tensors.emplace(e.name, TensorSummary{e.dtype, e.shape});
    const std::string digest = header_digest_text(meta, tensors);
    const uint32_t computed = crc32_of(digest.data(), digest.size());
    if (computed != *stored) {
      fail("header: it does not match its checksum (stored ", hex32(*stored), ", computed ", hex32(computed),
           "): the file is corrupt");
    }
    auto algorithm = meta.find(std::string(kChecksumKey));
    if (algorithm == meta.end() || algorithm->second != kChecksumAlgorithm) {
      fail("header: \"", kChecksumKey, "\" must be \"", kChecksumAlgorithm, "\" (written by a newer ember?)");
    }
    std::map<std::string, Entry*> by_name;
    for (Entry& e : layout.entries) by_name[e.name] = &e;
    for (auto it = meta.begin(); it != meta.end();) {
      const std::string& key = it->first;
      if (!is_checksum_key(key)) {
        ++it;
        continue;
      }
      if (key.rfind(kTensorChecksumPrefix, 0) == 0) {
        auto e = by_name.find(key.substr(kTensorChecksumPrefix.size()));
        if (e == by_name.end()) fail("header: checksum metadata \"", key, "\" names no tensor");
        e->second->checksum = parse_hex32(it->second);
        if (!e->second->checksum) fail("header: \"", key, "\" is \"", it->second, "\", not 8 hex digits");
      } else if (key != kChecksumKey && key != kHeaderChecksumKey) {
        fail("header: unknown checksum metadata \"", key, "\"");
      }
      it = meta.erase(it);
    }
    for (const Entry& e : layout.entries) {
      if (!e.checksum) fail("tensor \"", e.name, "\" has no checksum though the file has checksums (corrupt header)");
    }
  }

  // Sorted by offsets, the tensors must tile the data section exactly.
  void check_coverage(std::vector<Entry>& entries, uint64_t data_size) const {
    std::sort(entries.begin(), entries.end(),
              [](const Entry& a, const Entry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
    uint64_t at = 0;
    const Entry* previous = nullptr;
    for (const Entry& e : entries) {
      if (e.begin < at) {
        fail("tensors \"", previous->name, "\" [", previous->begin, ", ", previous->end, ") and \"", e.name, "\" [",
             e.begin, ", ", e.end, ") overlap");
      }
      if (e.begin > at) fail("bytes [", at, ", ", e.begin, ") of the data section belong to no tensor");
      at = e.end;
      previous = &e;
    }
    if (at != data_size) {
      fail("the data section has ", data_size, " bytes but the tensors cover only ", at,
           " (trailing data, or a corrupt header)");
    }
  }

  const char* op_;
  std::string source_;
};

// A file descriptor closed on scope exit.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

const char* safetensors_dtype_name(DType dtype) {
  for (const DTypeName& d : kDTypes) {
    if (d.dtype == dtype) return d.name;
  }
  EMBER_INTERNAL_ASSERT(false, "safetensors: no format name for dtype " << dtype_name(dtype));
}

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  NoGradGuard no_grad;
  struct Item {
    const std::string* name;
    Tensor dense;
  };
  std::vector<Item> items;
  for (const auto& [name, t] : tensors) {
    EMBER_CHECK(name != "__metadata__", "save_safetensors: " << path << ": \"__metadata__\" is reserved by the format "
                                                             << "and cannot name a tensor");
    EMBER_CHECK(t.defined(), "save_safetensors: " << path << ": tensor \"" << name << "\" is undefined");
    EMBER_CHECK(json::valid_utf8(name), "save_safetensors: " << path << ": a tensor name is not valid UTF-8");
    items.push_back({&name, t.detach().to(kCPU).contiguous()});
  }
  std::map<std::string, std::string> all_metadata;
  for (const auto& [key, value] : metadata) {
    EMBER_CHECK(json::valid_utf8(key) && json::valid_utf8(value),
                "save_safetensors: " << path << ": metadata \"" << key << "\" is not valid UTF-8");
    EMBER_CHECK(!is_checksum_key(key), "save_safetensors: " << path << ": metadata \"" << key
                                                            << "\": keys starting with \"" << kChecksumKey
                                                            << "\" are reserved for ember's checksums");
    all_metadata[key] = value;
  }
  all_metadata[std::string(kChecksumKey)] = kChecksumAlgorithm;
  std::map<std::string, TensorSummary> summaries;
  for (const Item& item : items) {
    const Tensor& t = item.dense;
    all_metadata[std::string(kTensorChecksumPrefix) + *item.name] =
        hex32(crc32_of(t.data_ptr(), uint64_t(t.numel()) * t.element_size()));
    summaries.emplace(*item.name, TensorSummary{t.dtype(), t.shape()});
  }
  const std::string digest = header_digest_text(all_metadata, summaries);
  all_metadata[kHeaderChecksumKey] = hex32(crc32_of(digest.data(), digest.size()));
  std::stable_sort(items.begin(), items.end(),
                   [](const Item& a, const Item& b) { return a.dense.element_size() > b.dense.element_size(); });
  std::string header = "{";
  if (!all_metadata.empty()) {
    header += "\"__metadata__\":{";
    for (const auto& [key, value] : all_metadata) {
      if (header.back() != '{') header += ',';
      header += json::quote(key);
      header += ':';
      header += json::quote(value);
    }
    header += '}';
  }
  uint64_t offset = 0;
  for (const Item& item : items) {
    const uint64_t nbytes = uint64_t(item.dense.numel()) * item.dense.element_size();
    if (header.size() > 1) header += ',';
    header += json::quote(*item.name);
    header += ":{\"dtype\":\"";
    header += safetensors_dtype_name(item.dense.dtype());
    header += "\",\"shape\":[";
    for (size_t d = 0; d < item.dense.shape().size(); ++d) {
      if (d > 0) header += ',';
      header += std::to_string(item.dense.shape()[d]);
    }
    header += "],\"data_offsets\":[";
    header += std::to_string(offset);
    header += ',';
    header += std::to_string(offset + nbytes);
    header += "]}";
    offset += nbytes;
  }
  header += "}";
  while ((8 + header.size()) % 8 != 0) header += ' ';  // aligns the data section
  const uint64_t length = header.size();
  AtomicFile file(path);
  file.write(&length, 8);
  file.write(header.data(), header.size());
  for (const Item& item : items) {
    file.write(item.dense.data_ptr(), size_t(item.dense.numel()) * item.dense.element_size());
  }
  file.commit();
}

SafetensorsContents parse_safetensors(const uint8_t* data, size_t size) {
  Reader reader("parse_safetensors", "<memory>");
  const uint64_t n = reader.header_length(data, size);
  const uint8_t* body = data + 8 + n;
  const uint64_t data_size = size - 8 - n;
  Layout layout = reader.layout(std::string_view(reinterpret_cast<const char*>(data + 8), size_t(n)), data_size);
  SafetensorsContents out;
  out.metadata = std::move(layout.metadata);
  for (const Entry& e : layout.entries) {
    reader.check_data(e, body + e.begin);
    if (e.dtype == DType::Bool) reader.check_bools(e, body + e.begin);
    Tensor t = empty(e.shape, e.dtype, kCPU);
    if (e.end > e.begin) std::memcpy(t.data_ptr(), body + e.begin, size_t(e.end - e.begin));
    out.tensors.emplace(e.name, std::move(t));
  }
  return out;
}

SafetensorsContents load_safetensors(const std::string& path) {
  Reader reader("load_safetensors", path);
  Fd file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) reader.fail("cannot open the file: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) reader.fail("cannot stat the file: ", std::strerror(errno));
  if (!S_ISREG(st.st_mode)) reader.fail("not a regular file");
  const uint64_t file_size = uint64_t(st.st_size);
  // Reads exactly size bytes at offset, or fails naming what was short.
  auto read_at = [&](void* dst, uint64_t size, uint64_t offset, const std::string& what) {
    uint8_t* p = static_cast<uint8_t*>(dst);
    while (size > 0) {
      const ssize_t got = ::pread(file.fd, p, size_t(std::min<uint64_t>(size, 1u << 30)), off_t(offset));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) reader.fail("reading ", what, " failed: ", std::strerror(errno));
      if (got == 0) reader.fail("the file ended while reading ", what, " (it shrank while being read?)");
      p += got;
      offset += uint64_t(got);
      size -= uint64_t(got);
    }
  };
  uint8_t first8[8] = {};
  if (file_size >= 8) read_at(first8, 8, 0, "the header length");
  const uint64_t n = reader.header_length(first8, file_size);
  std::string header(size_t(n), '\0');
  read_at(header.data(), n, 8, "the header");
  Layout layout = reader.layout(header, file_size - 8 - n);
  SafetensorsContents out;
  out.metadata = std::move(layout.metadata);
  for (const Entry& e : layout.entries) {
    Tensor t = empty(e.shape, e.dtype, kCPU);
    read_at(t.data_ptr(), e.end - e.begin, 8 + n + e.begin, "tensor \"" + e.name + "\"");
    reader.check_data(e, t.data_ptr());
    if (e.dtype == DType::Bool) reader.check_bools(e, static_cast<const uint8_t*>(t.data_ptr()));
    out.tensors.emplace(e.name, std::move(t));
  }
  return out;
}

}  // namespace ember
