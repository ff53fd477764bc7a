// ember-gpt's data: a text corpus as byte tokens (vocabulary 256, no
// tokenizer), split into training and validation text, and the batches cut
// from them.
//
// Contract:
// - load_corpus(path, val_fraction) reads `path`, a text file or a directory
//   of them; an empty path is the default corpus, the plain-text files of
//   Debian's package fortunes (kFortunesDir). In a directory it reads every
//   regular file in name order except fortune's index files (*.dat) and
//   their *.u8 links. In the fortune format (a line holding "%" alone ends
//   an entry) the "%" lines are dropped and entries are separated by a blank
//   line, so that the model learns text, not the file format.
// - The last val_fraction of each file (cut at a line start) is validation
//   text, the rest training text: with the default corpus every fortune
//   file has its share in both. A missing default corpus is a
//   CorpusError naming the package and --data; a split with fewer than
//   context + 1 tokens is one when the batches are cut.
// - random_batch draws `batch` windows of context + 1 tokens at uniformly
//   random offsets from `gen` (a CPU generator: its state is the data
//   order's, saved in checkpoints): input = window[0:T], target =
//   window[1:T+1], (batch, context) int64 on `device`.
// - evaluation_batches cuts `count` batches of windows spread evenly over
//   the whole text, the same every call: a fixed validation set.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "ember/core/generator.h"
#include "ember/core/tensor.h"

namespace ember::gpt {

inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";

class CorpusError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Corpus {
  std::string source;  // what was read
  int64_t files = 0;
  std::vector<uint8_t> train, val;
};

Corpus load_corpus(const std::string& path, double val_fraction);

struct TokenBatch {
  Tensor input;   // (batch, context) int64
  Tensor target;  // (batch, context) int64, input shifted by one
};

TokenBatch random_batch(const std::vector<uint8_t>& tokens, int64_t batch, int64_t context, Device device,
                        Generator& gen);

std::vector<TokenBatch> evaluation_batches(const std::vector<uint8_t>& tokens, int64_t batch, int64_t context,
                                           int64_t count, Device device);

}  // namespace ember::gpt
