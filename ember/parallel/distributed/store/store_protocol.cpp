// Encoding and decoding of the TCPStore frames (ember/parallel/distributed/store/store_protocol.h).
#include "ember/parallel/distributed/store/store_protocol.h"

#include "ember/core/error.h"

namespace ember::parallel::detail {

namespace {

void put_le(std::string& buf, uint64_t v, int nbytes) {
  for (int i = 0; i < nbytes; ++i) buf.push_back(char((v >> (8 * i)) & 0xff));
}

uint64_t get_le(std::string_view s) {
  uint64_t v = 0;
  for (size_t i = 0; i < s.size(); ++i) v |= uint64_t(uint8_t(s[i])) << (8 * i);
  return v;
}

}  // namespace

FrameWriter& FrameWriter::u8(uint8_t v) {
  buf_.push_back(char(v));
  return *this;
}

FrameWriter& FrameWriter::i64(int64_t v) {
  put_le(buf_, uint64_t(v), 8);
  return *this;
}

FrameWriter& FrameWriter::bytes(std::string_view v) {
  EMBER_CHECK(v.size() <= kMaxStoreFrame, "store: a value of " << v.size() << " bytes is larger than the "
                                                               << kMaxStoreFrame << " bytes a store message may hold");
  put_le(buf_, v.size(), 4);
  buf_.append(v);
  return *this;
}

FrameWriter& FrameWriter::keys(const std::vector<std::string>& v) {
  put_le(buf_, v.size(), 4);
  for (const std::string& k : v) bytes(k);
  return *this;
}

std::string FrameWriter::finish() {
  const size_t payload = buf_.size() - 4;
  EMBER_CHECK(payload <= kMaxStoreFrame,
              "store: a message of " << payload << " bytes is larger than the " << kMaxStoreFrame << " bytes allowed");
  for (int i = 0; i < 4; ++i) buf_[i] = char((payload >> (8 * i)) & 0xff);
  return std::move(buf_);
}

std::string_view FrameReader::take(size_t n) {
  EMBER_CHECK(n <= rest_.size(), "truncated store message (a field of " << n << " bytes, " << rest_.size() << " left)");
  std::string_view out = rest_.substr(0, n);
  rest_.remove_prefix(n);
  return out;
}

uint8_t FrameReader::u8() { return uint8_t(take(1)[0]); }

int64_t FrameReader::i64() { return int64_t(get_le(take(8))); }

std::string FrameReader::bytes() {
  size_t n = size_t(get_le(take(4)));
  return std::string(take(n));
}

std::vector<std::string> FrameReader::keys() {
  size_t n = size_t(get_le(take(4)));
  // Each key takes at least its 4-byte length: a garbage count fails here,
  // before anything is reserved for it.
  EMBER_CHECK(n <= rest_.size() / 4, "truncated store message (" << n << " keys announced)");
  std::vector<std::string> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back(bytes());
  return out;
}

uint32_t frame_length(const char* header) { return uint32_t(get_le(std::string_view(header, 4))); }

}  // namespace ember::parallel::detail
