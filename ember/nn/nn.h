// The nn layer in one include: modules, layers, containers, losses, init
// and nn::functional. ember.h includes it.
#pragma once

#include "ember/nn/activation.h"
#include "ember/nn/attention.h"
#include "ember/nn/batch_norm.h"
#include "ember/nn/container.h"
#include "ember/nn/conv.h"
#include "ember/nn/dropout.h"
#include "ember/nn/embedding.h"
#include "ember/nn/flatten.h"
#include "ember/nn/functional.h"
#include "ember/nn/identity.h"
#include "ember/nn/init.h"
#include "ember/nn/layer_norm.h"
#include "ember/nn/linear.h"
#include "ember/nn/loss.h"
#include "ember/nn/module.h"
#include "ember/nn/module_dict.h"
#include "ember/nn/ordered_dict.h"
#include "ember/nn/pooling.h"
#include "ember/nn/serialize.h"
#include "ember/nn/size2.h"
