// The build's GPU architectures (EMBER_CUDA_ARCHITECTURES, defined for this
// file alone by CMakeLists.txt, entries separated by ','), what they cover,
// and the message for a GPU they do not (see architectures.h).
#include "ember/core/cuda/architectures.h"

#include <cctype>
#include <sstream>
#include <vector>

namespace ember::cuda {
namespace {

#ifndef EMBER_CUDA_ARCHITECTURES
#define EMBER_CUDA_ARCHITECTURES ""
#endif

struct Entry {
  std::string text;    // as written
  int number = -1;     // 86 for "86-real"; -1 for a word (native, all, all-major)
  bool exact = false;  // "90a": SASS for 9.0 alone
  bool sass = false;
  bool ptx = false;
};

std::vector<Entry> parse(const std::string& built) {
  std::vector<Entry> entries;
  std::string token;
  std::istringstream in(built);
  while (std::getline(in, token, ';')) {
    if (token.empty()) continue;
    Entry e;
    e.text = token;
    size_t i = 0;
    while (i < token.size() && std::isdigit(static_cast<unsigned char>(token[i]))) ++i;
    if (i == 0) {
      entries.push_back(e);
      continue;
    }
    e.number = std::stoi(token.substr(0, i));
    if (i < token.size() && token[i] == 'a') {
      e.exact = true;
      ++i;
    }
    const std::string kind = token.substr(i);
    e.sass = kind.empty() || kind == "-real";
    e.ptx = kind.empty() || kind == "-virtual";
    entries.push_back(e);
  }
  return entries;
}

std::string arch_name(const Entry& e) { return std::to_string(e.number) + (e.exact ? "a" : ""); }

}  // namespace

std::string built_architectures() {
  std::string list = EMBER_CUDA_ARCHITECTURES;
  for (char& c : list) {
    if (c == ',') c = ';';
  }
  return list;
}

std::string describe_architectures(const std::string& built) {
  std::vector<std::string> parts;
  for (const Entry& e : parse(built)) {
    if (e.number < 0) {
      parts.push_back(e.text == "native" ? "native (the GPUs of the building machine)" : e.text);
    } else if (e.sass && e.ptx) {
      parts.push_back("sm_" + arch_name(e) + " + PTX compute_" + arch_name(e));
    } else if (e.sass) {
      parts.push_back("sm_" + arch_name(e));
    } else if (e.ptx) {
      parts.push_back("PTX compute_" + arch_name(e));
    }
  }
  if (parts.empty()) return "no GPU architecture";
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) s += i + 1 == parts.size() ? " and " : ", ";
    s += parts[i];
  }
  return s;
}

std::optional<bool> architectures_cover(const std::string& built, int major, int minor) {
  const int capability = major * 10 + minor;
  bool unknown = false;
  for (const Entry& e : parse(built)) {
    if (e.number < 0) {
      unknown = true;
      continue;
    }
    if (e.sass && (e.exact ? e.number == capability : e.number / 10 == major && e.number % 10 <= minor)) return true;
    if (e.ptx && !e.exact && e.number <= capability) return true;
  }
  if (unknown) return std::nullopt;
  return false;
}

std::string no_kernel_image_message(int device, const std::string& gpu_name, int major, int minor,
                                    const std::string& built) {
  const std::string cc = std::to_string(major) + std::to_string(minor);
  std::ostringstream s;
  s << "cuda:" << device << " (" << gpu_name << ", compute capability " << major << "." << minor
    << ") cannot run ember's kernels: this ember was built for CUDA architectures "
    << (built.empty() ? std::string("(none)") : built) << " (" << describe_architectures(built)
    << "), and a GPU of compute capability " << major << "." << minor << " runs only SASS sm_" << major
    << "x with x <= " << minor << " or PTX compute_NN with NN <= " << cc
    << ". Rebuild ember with -DCMAKE_CUDA_ARCHITECTURES=" << cc
    << " (this GPU), -DCMAKE_CUDA_ARCHITECTURES=native (the GPUs of the building machine) or a list that "
       "includes "
    << cc << " (docs/build.md); or keep tensors on the CPU";
  return s.str();
}

}  // namespace ember::cuda
