// --amp, the mixed-precision choice that ember-train and ember-gpt share:
// the forward and the loss under autocast in float16 (with dynamic loss
// scaling, a GradScaler) or bfloat16, or none (float32).
#pragma once

#include <string>

namespace ember::examples {

enum class Amp { None, FP16, BF16 };

// --amp's value: "fp16", "bf16" or "none"; else a UsageError naming them.
Amp parse_amp(const std::string& flag, const std::string& value);

// The name parse_amp reads.
const char* amp_name(Amp amp);

}  // namespace ember::examples
