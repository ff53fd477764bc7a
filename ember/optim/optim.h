// The optimizers, schedulers, gradient clipping and checkpoints of ember.
#pragma once

#include "ember/optim/adam.h"
#include "ember/optim/checkpoint.h"
#include "ember/optim/clip_grad.h"
#include "ember/optim/lr_scheduler.h"
#include "ember/optim/optimizer.h"
#include "ember/optim/serialize.h"
#include "ember/optim/sgd.h"
