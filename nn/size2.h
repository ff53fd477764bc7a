// nn::Size2 and nn::OptionalSize2 are ember's (core/size2.h): the ops and
// the layers take the same (height, width) pair.
#pragma once

#include "core/size2.h"

namespace ember::nn {

using ember::OptionalSize2;
using ember::Size2;

}  // namespace ember::nn
