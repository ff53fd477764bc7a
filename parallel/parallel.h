// The parallel layer: single-process data parallelism (DataParallel and its
// pieces scatter, replicate, parallel_apply, gather) and GPU selection.
#pragma once

#include "parallel/coalesced.h"
#include "parallel/data_parallel.h"
#include "parallel/devices.h"
#include "parallel/parallel_apply.h"
#include "parallel/replicate.h"
#include "parallel/scatter_gather.h"
#include "parallel/value.h"
#include "parallel/warn_once.h"
