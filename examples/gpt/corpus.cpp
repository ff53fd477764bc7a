// Reading the corpus and cutting batches (see examples/gpt/corpus.h).
#include "examples/gpt/corpus.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "ember/core/ops.h"

namespace ember::gpt {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CorpusError("--data: cannot read '" + path.string() + "'");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// fortune's format: "%" alone on a line ends an entry. Entries come back
// separated by one blank line; text without "%" lines is returned as is.
std::string drop_fortune_separators(const std::string& text) {
  std::istringstream lines(text);
  std::string line, out, entry;
  bool separated = false;
  while (std::getline(lines, line)) {
    if (line == "%") {
      separated = true;
      if (!entry.empty()) out += entry + "\n";
      entry.clear();
    } else {
      entry += line + "\n";
    }
  }
  if (!separated) return text;
  if (!entry.empty()) out += entry + "\n";
  return out;
}

// Appends text's head to train and its last `fraction` (from a line start) to val.
void split_into(const std::string& text, double fraction, Corpus& corpus) {
  size_t cut = size_t(double(text.size()) * (1.0 - fraction));
  const size_t line_start = text.find('\n', cut);
  cut = line_start == std::string::npos ? text.size() : line_start + 1;
  corpus.train.insert(corpus.train.end(), text.begin(), text.begin() + std::ptrdiff_t(cut));
  corpus.val.insert(corpus.val.end(), text.begin() + std::ptrdiff_t(cut), text.end());
}

void check_length(const std::vector<uint8_t>& tokens, int64_t context, const char* what) {
  if (int64_t(tokens.size()) <= context) {
    throw CorpusError(std::string("the ") + what + " text has " + std::to_string(tokens.size()) +
                      " bytes, fewer than context + 1 = " + std::to_string(context + 1) +
                      "; use a larger --data file, a smaller --context or another --val-fraction");
  }
}

TokenBatch batch_at(const std::vector<uint8_t>& tokens, const std::vector<int64_t>& offsets, int64_t context,
                    Device device) {
  const int64_t n = int64_t(offsets.size());
  std::vector<int64_t> input(size_t(n * context)), target(size_t(n * context));
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t t = 0; t < context; ++t) {
      input[size_t(b * context + t)] = tokens[size_t(offsets[size_t(b)] + t)];
      target[size_t(b * context + t)] = tokens[size_t(offsets[size_t(b)] + t + 1)];
    }
  }
  return {from_vector(input, {n, context}, device), from_vector(target, {n, context}, device)};
}

}  // namespace

Corpus load_corpus(const std::string& path, double val_fraction) {
  Corpus corpus;
  corpus.source = path.empty() ? kFortunesDir : path;
  std::error_code ec;
  if (path.empty() && !fs::is_directory(kFortunesDir, ec)) {
    throw CorpusError(std::string("the default corpus ") + kFortunesDir +
                      " is missing: install Debian's package fortunes (apt-get install fortunes, or "
                      "scripts/install_deps.sh), or train on any text file with --data FILE");
  }
  std::vector<fs::path> files;
  if (fs::is_directory(corpus.source, ec)) {
    for (const fs::directory_entry& e : fs::directory_iterator(corpus.source)) {
      const std::string ext = e.path().extension().string();
      if (e.is_regular_file() && !e.is_symlink() && ext != ".dat" && ext != ".u8") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    if (files.empty()) throw CorpusError("--data: the directory '" + corpus.source + "' holds no text file");
  } else {
    files.push_back(corpus.source);
  }
  for (const fs::path& file : files) split_into(drop_fortune_separators(read_file(file)), val_fraction, corpus);
  corpus.files = int64_t(files.size());
  return corpus;
}

TokenBatch random_batch(const std::vector<uint8_t>& tokens, int64_t batch, int64_t context, Device device,
                        Generator& gen) {
  check_length(tokens, context, "training");
  const Tensor drawn = randint(0, int64_t(tokens.size()) - context, {batch}, DType::Int64, kCPU, &gen);
  const int64_t* p = drawn.data<int64_t>();
  return batch_at(tokens, std::vector<int64_t>(p, p + batch), context, device);
}

std::vector<TokenBatch> evaluation_batches(const std::vector<uint8_t>& tokens, int64_t batch, int64_t context,
                                           int64_t count, Device device) {
  check_length(tokens, context, "validation");
  const int64_t windows = batch * count, last = int64_t(tokens.size()) - context - 1;
  std::vector<TokenBatch> batches;
  for (int64_t i = 0; i < count; ++i) {
    std::vector<int64_t> offsets;
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t w = i * batch + b;
      offsets.push_back(windows == 1 ? 0 : w * last / (windows - 1));
    }
    batches.push_back(batch_at(tokens, offsets, context, device));
  }
  return batches;
}

}  // namespace ember::gpt
