// gzip decompression of a buffer in memory, through zlib.
//
// Contract: gunzip() inflates every gzip member of data (gzip files may be
// concatenations) and checks each member's CRC and length. A corrupt
// stream, a stream that ends before its end marker, or bytes after the last
// member that do not start another one are ember::Errors naming `name` and
// the problem. The size in a member's trailer only sizes the first
// allocation, capped at what the input can expand to (deflate's 1032:1), so
// a lying trailer cannot make it allocate more.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ember::data {

// True when data starts with the gzip magic bytes 1f 8b.
bool is_gzip(const uint8_t* data, size_t size);
std::vector<uint8_t> gunzip(const uint8_t* data, size_t size, const std::string& name);

}  // namespace ember::data
