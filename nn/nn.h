// The nn layer in one include: modules, layers, containers, losses, init
// and nn::functional. ember.h includes it.
#pragma once

#include "nn/activation.h"
#include "nn/attention.h"
#include "nn/batch_norm.h"
#include "nn/container.h"
#include "nn/conv.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/flatten.h"
#include "nn/functional.h"
#include "nn/identity.h"
#include "nn/init.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/module.h"
#include "nn/module_dict.h"
#include "nn/ordered_dict.h"
#include "nn/pooling.h"
#include "nn/serialize.h"
#include "nn/size2.h"
