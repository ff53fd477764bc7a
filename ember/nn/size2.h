// nn::Size2 and nn::OptionalSize2 are ember's (ember/core/size2.h): the ops and
// the layers take the same (height, width) pair.
#pragma once

#include "ember/core/size2.h"

namespace ember::nn {

using ember::OptionalSize2;
using ember::Size2;

}  // namespace ember::nn
