// --amp's parsing and names (examples/common/amp.h).
#include "examples/common/amp.h"

#include "examples/common/flags.h"

namespace ember::examples {

Amp parse_amp(const std::string& flag, const std::string& value) {
  return parse_choice<Amp>(flag, value, {{"fp16", Amp::FP16}, {"bf16", Amp::BF16}, {"none", Amp::None}});
}

const char* amp_name(Amp amp) {
  switch (amp) {
    case Amp::FP16: return "fp16";
    case Amp::BF16: return "bf16";
    case Amp::None: return "none";
  }
  return "?";
}

}  // namespace ember::examples
