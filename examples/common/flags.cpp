// The example programs' shared flag parsing and usage formatting.
#include "examples/common/flags.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "ember/core/cuda/device.h"
#include "ember/core/error.h"

namespace ember::examples {

void bad_value(const std::string& flag, const std::string& value, const std::string& allowed) {
  throw UsageError(flag + ": invalid value '" + value + "'; " + allowed);
}

double parse_number(const std::string& flag, const std::string& value, double min, bool min_exclusive, double max) {
  double v = 0;
  const char* end = value.data() + value.size();
  auto [ptr, ec] = std::from_chars(value.data(), end, v);
  const bool in_range = std::isfinite(v) && (min_exclusive ? v > min : v >= min) && v <= max;
  if (value.empty() || ec != std::errc() || ptr != end || !in_range) {
    std::ostringstream allowed;
    allowed << "expected a number " << (min_exclusive ? "above " : "from ") << min << (min_exclusive ? " up " : " ")
            << "to " << max;
    bad_value(flag, value, allowed.str());
  }
  return v;
}

std::pair<std::string, std::optional<std::string>> split_argument(const std::string& arg) {
  if (const size_t eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
    return {arg.substr(0, eq), arg.substr(eq + 1)};
  }
  return {arg, std::nullopt};
}

std::string flag_entry(const char* name, const char* value, const std::string& help, size_t indent) {
  constexpr size_t kWidth = 100;
  std::ostringstream s;
  const std::string left = std::string("  ") + name + (value ? std::string(" ") + value : "");
  s << left;
  size_t column = left.size();
  if (column >= indent) {
    s << "\n";
    column = 0;
  }
  std::istringstream words(help);
  std::string word;
  bool line_start = true;
  while (words >> word) {
    if (!line_start && column + 1 + word.size() > kWidth) {
      s << "\n";
      column = 0;
      line_start = true;
    }
    if (line_start) {
      s << std::string(indent - column, ' ');
      column = indent;
    } else {
      s << ' ';
      ++column;
    }
    s << word;
    column += word.size();
    line_start = false;
  }
  s << "\n";
  return s.str();
}

Device resolve_device(const std::string& spec) {
  if (spec == "auto") return cuda::is_available() ? cuda_device(0) : kCPU;
  Device device;
  try {
    device = Device(spec);
  } catch (const Error&) {
    bad_value("--device", spec, "expected cpu, cuda, cuda:N or auto");
  }
  if (device.is_cuda() && device.index >= cuda::device_count()) {
    std::ostringstream why;
    why << cuda::device_count() << " CUDA devices are visible";
#if !EMBER_WITH_CUDA
    why << " (this ember was built without CUDA)";
#endif
    why << ", CUDA_VISIBLE_DEVICES=" << cuda::visible_devices_env() << "; use --device cpu or auto";
    bad_value("--device", spec, why.str());
  }
  return device;
}

void check_directory_of(const std::string& flag, const std::string& path) {
  if (path.empty()) throw UsageError(flag + ": the file name is empty");
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    throw UsageError(flag + ": the directory " + dir.string() + " of '" + path + "' does not exist");
  }
  if (std::filesystem::is_directory(path, ec)) throw UsageError(flag + ": '" + path + "' is a directory");
}

void check_continuation(const char* save_flag, const std::string& save, const std::string& resume, int64_t stop_after,
                        const char* length_flag, int64_t length) {
  const std::string save_name = save_flag, length_name = length_flag;
  if (!save.empty()) check_directory_of(save_name, save);
  if (!resume.empty() && !std::ifstream(resume)) throw UsageError("--resume: cannot read '" + resume + "'");
  if (stop_after > length) {
    throw UsageError("--stop-after: " + std::to_string(stop_after) + " is beyond " + length_name + " " +
                     std::to_string(length));
  }
  if (stop_after > 0 && save.empty()) {
    throw UsageError("--stop-after: without " + save_name + " the run could not be continued; add " + save_name +
                     " FILE");
  }
}

}  // namespace ember::examples
