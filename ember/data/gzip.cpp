// gzip decompression with zlib's inflate, member after member.
#include "ember/data/gzip.h"

#include <algorithm>

#include "ember/core/error.h"

#define ZLIB_CONST
#include <zlib.h>

namespace ember::data {
namespace {

constexpr size_t kMaxChunk = size_t(1) << 30;  // zlib counts bytes in 32-bit uInt
constexpr size_t kMaxRatio = 1032;             // deflate's largest expansion

// The uncompressed size (mod 2^32) the last member's trailer claims.
size_t trailer_size(const uint8_t* data, size_t size) {
  if (size < 18) return 0;  // smaller than any gzip member
  const uint8_t* p = data + size - 4;
  return size_t(p[0]) | size_t(p[1]) << 8 | size_t(p[2]) << 16 | size_t(p[3]) << 24;
}

struct Inflater {
  z_stream zs{};
  ~Inflater() { inflateEnd(&zs); }
};

}  // namespace

bool is_gzip(const uint8_t* data, size_t size) { return size >= 2 && data[0] == 0x1f && data[1] == 0x8b; }

std::vector<uint8_t> gunzip(const uint8_t* data, size_t size, const std::string& name) {
  Inflater in;
  z_stream& zs = in.zs;
  EMBER_CHECK(inflateInit2(&zs, 16 + MAX_WBITS) == Z_OK, "gunzip: " << name << ": zlib could not start inflating "
                                                                    << "(out of memory)");
  // Room for what the trailer claims, and some: the end marker is then read
  // without growing the buffer once it holds all the data.
  std::vector<uint8_t> out(std::min(trailer_size(data, size), size * kMaxRatio) + (size_t(1) << 16));
  size_t fed = 0, produced = 0;
  for (;;) {
    if (zs.avail_in == 0 && fed < size) {
      const size_t n = std::min(size - fed, kMaxChunk);
      zs.next_in = data + fed;
      zs.avail_in = uInt(n);
      fed += n;
    }
    if (produced == out.size()) out.resize(out.size() * 2);
    const size_t room = std::min(out.size() - produced, kMaxChunk);
    zs.next_out = out.data() + produced;
    zs.avail_out = uInt(room);
    const int ret = inflate(&zs, Z_NO_FLUSH);
    produced += room - zs.avail_out;
    if (ret == Z_OK) continue;
    if (ret == Z_STREAM_END) {
      const size_t consumed = fed - zs.avail_in;
      if (consumed == size) break;
      EMBER_CHECK(is_gzip(data + consumed, size - consumed),
                  "gunzip: " << name << ": " << size - consumed << " bytes after the end of the gzip stream (at byte "
                             << consumed << ") are not another gzip member; the file is corrupt");
      inflateReset(&zs);
      continue;
    }
    EMBER_CHECK(ret != Z_BUF_ERROR, "gunzip: " << name << ": the gzip stream is truncated: its " << size
                                               << " bytes end before the stream's end marker");
    EMBER_FAIL("gunzip: " << name << ": corrupt gzip data (zlib: " << (zs.msg ? zs.msg : zError(ret)) << ")");
  }
  out.resize(produced);
  return out;
}

}  // namespace ember::data
