// The parallel layer's public headers: mixed precision, activation
// checkpointing, single-process data parallelism (DataParallel and its
// pieces scatter, replicate, parallel_apply, gather), GPU selection, and
// the process groups of distributed training.
#pragma once

#include "parallel/amp/autocast.h"
#include "parallel/amp/grad_scaler.h"
#include "parallel/amp/master_weights.h"
#include "parallel/checkpoint.h"
#include "parallel/coalesced.h"
#include "parallel/data_parallel.h"
#include "parallel/devices.h"
#include "parallel/init.h"
#include "parallel/parallel_apply.h"
#include "parallel/replicate.h"
#include "parallel/scatter_gather.h"
#include "parallel/tcp_store.h"
#include "parallel/value.h"
#include "parallel/warn_once.h"
