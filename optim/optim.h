// The optimizers, schedulers, gradient clipping and checkpoints of ember.
#pragma once

#include "optim/adam.h"
#include "optim/checkpoint.h"
#include "optim/clip_grad.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "optim/serialize.h"
#include "optim/sgd.h"
