// safetensors files: named tensors plus string metadata, in the format of
// huggingface/safetensors, readable by its Python and Rust libraries.
//
// Format: an 8-byte little-endian header length N; N bytes of a UTF-8 JSON
// object (padded with spaces)
//   {"__metadata__": {"key": "value", ...},
//    "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
// then the data section: each tensor's elements, row-major and little-endian,
// at [begin, end) counted from the start of the data section. Dtypes: F32,
// F64, F16, BF16, I32, I64, BOOL (one byte, 0 or 1).
//
// Contract:
// - save_safetensors writes any tensors (any device, any layout: each is
//   copied to a dense CPU tensor) atomically (ember/nn/atomic_file.h: a temporary
//   file in the same directory, fsync, rename, fsync of the directory).
//   Tensors are laid out by element size, largest first, then by name, so
//   every tensor is aligned to its element size. The name "__metadata__" and
//   names or metadata that are not valid UTF-8 are an ember::Error.
// - load_safetensors and parse_safetensors accept exactly the files this
//   format allows and throw an ember::Error naming the file (or "<memory>")
//   and the problem for anything else: a file shorter than 8 bytes, a header
//   length beyond the file or above 100 MB, a header that is not strict JSON
//   (ember/nn/json.h) or not an object of tensor entries, an unknown dtype, an
//   entry with missing or extra fields, a shape whose byte size does not
//   match its offsets, offsets beyond the data, tensors that overlap or
//   leave gaps, data after the last tensor, metadata values that are not
//   strings, and BOOL bytes other than 0 and 1. They never crash or read
//   out of bounds on any input (fuzz/safetensors_fuzz.cpp checks this).
// - The result holds CPU tensors that own their memory.
//
// Checksums (ember's addition; other readers see plain string metadata):
// save_safetensors adds to "__metadata__"
//   "ember.checksum"               "crc32"
//   "ember.checksum.tensor.<name>" the CRC-32 of the tensor's data bytes
//   "ember.checksum.header"        the CRC-32 of the header's meaning: the
//                                  lines  "<key>":"<value>"\n  of every other
//                                  metadata entry, then  "<name>":<DTYPE>[d0,d1]\n
//                                  of every tensor, each in byte order of
//                                  the names, strings as json::quote writes them
// as 8 lowercase hex digits (CRC-32 is zlib's, Python's zlib.crc32). Keys
// starting with "ember.checksum" are reserved: passing one is an error. A
// file with any of them must carry and match all of them (header first),
// or the reader throws an ember::Error naming the file and "header" or the
// tensor; the keys are then left out of the returned metadata. A file with
// none of them (PyTorch's, safetensors') loads unchecked. So every flipped
// byte of a checksummed file is an error, except one that keeps the header
// valid JSON of the same meaning, which loads the same tensors and metadata:
// a padding space turned into a tab, CR or LF. data_offsets are not in
// the digest (another writer may lay tensors out differently): the tiling
// checks and the tensors' checksums catch a changed offset. The cost is
// one CRC pass over the data on each side: ~0.3 s per GiB on one core.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "ember/core/tensor.h"

namespace ember {

struct SafetensorsContents {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

SafetensorsContents load_safetensors(const std::string& path);

// The same reader over a complete file image in memory.
SafetensorsContents parse_safetensors(const uint8_t* data, size_t size);

// "F32", "BF16", ...: the format's name of a dtype.
const char* safetensors_dtype_name(DType dtype);

}  // namespace ember
