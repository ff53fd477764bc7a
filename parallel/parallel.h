// The parallel layer's public headers: mixed precision (amp/), activation
// checkpointing (checkpoint/), single-process data parallelism
// (data_parallel/: DataParallel and its pieces scatter, replicate,
// parallel_apply, gather), and distributed training (distributed/: process
// groups and their stores, DistributedDataParallel with its communication
// hooks, SyncBatchNorm). GPU selection is core/cuda/devices.h.
#pragma once

#include "parallel/amp/autocast.h"
#include "parallel/amp/grad_scaler.h"
#include "parallel/amp/master_weights.h"
#include "parallel/checkpoint/checkpoint.h"
#include "parallel/data_parallel/data_parallel.h"
#include "parallel/data_parallel/parallel_apply.h"
#include "parallel/data_parallel/replicate.h"
#include "parallel/data_parallel/scatter_gather.h"
#include "parallel/distributed/ddp/comm_hooks.h"
#include "parallel/distributed/ddp/distributed_data_parallel.h"
#include "parallel/distributed/ddp/sync_batch_norm.h"
#include "parallel/distributed/init.h"
#include "parallel/distributed/store/tcp_store.h"
