// The command-line machinery that ember's example programs share: a table of
// flags, the loop that applies argv to it, the value parsers, the usage
// text's flag list, the flags every program has (--device, --help) and the
// checks of a run that can be stopped and resumed.
//
// Contract:
// - A program describes each flag by a Flag<Raw>: its name ("--steps"), the
//   value's placeholder (null for a switch) and its help, which ends with the
//   default. set() stores the value into the program's Raw, the options as
//   the command line said them, before defaults that depend on other flags.
// - parse_flags() accepts "--flag value" and "--flag=value" and throws
//   UsageError for an unknown argument, a switch given a value, or a missing
//   value. The parsers throw UsageError naming the flag, the value and what
//   is allowed: "--lr: invalid value 'x'; expected a number above 0 up to 10".
// - parse_command_line() is a program's parse_options: the flags applied to
//   a Raw, then, unless --help was given (nothing else is checked then), the
//   program's finish(raw) resolves the defaults that depend on other flags
//   and checks the values. Raw holds `options` (with `help`) and, for
//   device_flag(), the `device` spec that finish gives to resolve_device().
// - flag_list() is the usage text's list: each flag and its placeholder, then
//   its help word-wrapped to 100 columns under `indent`, beside the flag when
//   the flag is shorter than the indent, else on the lines below.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ember/core/device.h"

namespace ember::examples {

// A bad command line; main() prints it with the usage text and exits 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <typename Raw>
struct Flag {
  const char* name;
  const char* value;  // the value's placeholder; null for a switch
  std::string help;   // ends with the default
  std::function<void(Raw&, const std::string& flag, const std::string& value)> set;
};

[[noreturn]] void bad_value(const std::string& flag, const std::string& value, const std::string& allowed);

// An integer in [min, max].
template <typename T>
T parse_integer(const std::string& flag, const std::string& value, T min, T max) {
  T v{};
  const char* end = value.data() + value.size();
  auto [ptr, ec] = std::from_chars(value.data(), end, v);
  if (value.empty() || ec != std::errc() || ptr != end || v < min || v > max) {
    std::ostringstream allowed;
    allowed << "expected an integer from " << min << " to " << max;
    bad_value(flag, value, allowed.str());
  }
  return v;
}

// A finite number in [min, max] (or (min, max] when min_exclusive).
double parse_number(const std::string& flag, const std::string& value, double min, bool min_exclusive, double max);

// One of the named choices.
template <typename E>
E parse_choice(const std::string& flag, const std::string& value,
               std::initializer_list<std::pair<const char*, E>> choices) {
  std::string allowed = "expected one of";
  for (const auto& [name, e] : choices) {
    if (value == name) return e;
    allowed += std::string(" ") + name;
  }
  bad_value(flag, value, allowed);
}

// Splits "--flag=value" into the flag and its value; no value for any other argument.
std::pair<std::string, std::optional<std::string>> split_argument(const std::string& arg);

// Applies argv[1..argc) to raw through the table.
template <typename Raw>
void parse_flags(int argc, const char* const* argv, const std::vector<Flag<Raw>>& table, Raw& raw) {
  for (int i = 1; i < argc; ++i) {
    auto [name, value] = split_argument(argv[i]);
    const Flag<Raw>* flag = nullptr;
    for (const Flag<Raw>& f : table) {
      if (name == f.name) flag = &f;
    }
    if (flag == nullptr) throw UsageError("unknown argument '" + name + "'");
    if (flag->value == nullptr) {
      if (value) throw UsageError(name + " takes no value");
    } else if (!value) {
      if (i + 1 == argc) throw UsageError(name + " needs a value (" + flag->value + ")");
      value = argv[++i];
    }
    flag->set(raw, name, value.value_or(""));
  }
}

// The options argv gives (see the contract).
template <typename Raw, typename Finish>
auto parse_command_line(int argc, const char* const* argv, const std::vector<Flag<Raw>>& table, Finish finish) {
  Raw raw;
  parse_flags(argc, argv, table, raw);
  if (raw.options.help) return raw.options;
  return finish(std::move(raw));
}

// --device, stored as given for resolve_device().
template <typename Raw>
Flag<Raw> device_flag() {
  return {"--device", "cpu|cuda|cuda:N|auto",
          "where to train; auto is cuda:0 when a GPU is visible, else cpu; default auto",
          [](Raw& r, const std::string&, const std::string& v) { r.device = v; }};
}

// --help, which sets options.help.
template <typename Raw>
Flag<Raw> help_flag() {
  return {"--help", nullptr, "print this text and exit",
          [](Raw& r, const std::string&, const std::string&) { r.options.help = true; }};
}

// One flag's entry in the usage text (see the contract).
std::string flag_entry(const char* name, const char* value, const std::string& help, size_t indent);

template <typename Raw>
std::string flag_list(const std::vector<Flag<Raw>>& table, size_t indent) {
  std::string s;
  for (const Flag<Raw>& f : table) s += flag_entry(f.name, f.value, f.help, indent);
  return s;
}

// A program's usage text: `head`, the table's flag list, then `tail`.
template <typename Raw>
std::string usage_text(const std::string& head, const std::vector<Flag<Raw>>& table, size_t indent,
                       const std::string& tail) {
  return head + flag_list(table, indent) + tail;
}

// --device's value: "auto" is cuda:0 when a GPU is visible, else the CPU;
// "cpu", "cuda", "cuda:N" as Device parses them. A GPU index past the
// visible ones is a UsageError naming the count and CUDA_VISIBLE_DEVICES.
Device resolve_device(const std::string& spec);

// A file the program will write at `path` (given by `flag`): its directory
// must exist and the path must not be a directory; else a UsageError.
void check_directory_of(const std::string& flag, const std::string& path);

// The flags of a run that saves checkpoints and can be continued, checked
// before it starts: the checkpoint's directory (check_directory_of) when
// `save_flag` ("--save") is given, a readable --resume file when given, and
// --stop-after (0: not given) at most the run's length (`length_flag`,
// "--steps") and only with a checkpoint to continue from. Else a UsageError.
void check_continuation(const char* save_flag, const std::string& save, const std::string& resume, int64_t stop_after,
                        const char* length_flag, int64_t length);

}  // namespace ember::examples
