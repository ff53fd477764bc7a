// IDX files, the format of MNIST and Fashion-MNIST, plain or gzip-compressed.
//
// Format: a big-endian magic 00 00 <type> <rank>, then <rank> big-endian
// uint32 sizes, then the elements in row-major order. ember reads type 0x08
// (unsigned byte), the type of every MNIST-like data set. ember has no uint8
// dtype, so the bytes become:
// - rank 1 (idx1, labels): an int64 tensor of the byte values;
// - rank 2 or more (idx3, images): a float32 tensor of value / 255, in
//   [0, 1], as torchvision's ToTensor scales images.
//
// Contract:
// - A file that starts with the gzip magic (1f 8b) is decompressed first
//   (zlib), whatever its name.
// - The data must be exactly the product of the sizes in bytes.
// - Malformed input is an ember::Error naming the file (for parse_idx, the
//   name given) and the problem: a bad magic, a type other than 0x08, rank 0,
//   a header or data shorter than the sizes say (truncated), bytes after
//   the data, or a gzip error (see ember/data/gzip.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ember/core/tensor.h"

namespace ember::data {

Tensor read_idx(const std::string& path);
// The parser behind read_idx, on bytes in memory (gzip-compressed or not).
Tensor parse_idx(const uint8_t* data, size_t size, const std::string& name = "<memory>");

}  // namespace ember::data
