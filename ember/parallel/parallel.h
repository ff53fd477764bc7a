// The parallel layer's public headers: mixed precision (amp/), activation
// checkpointing (checkpoint/), single-process data parallelism
// (data_parallel/: DataParallel and its pieces scatter, replicate,
// parallel_apply, gather), and distributed training (distributed/: process
// groups and their stores, DistributedDataParallel with its communication
// hooks, SyncBatchNorm). GPU selection is ember/core/cuda/devices.h.
#pragma once

#include "ember/parallel/amp/autocast.h"
#include "ember/parallel/amp/grad_scaler.h"
#include "ember/parallel/amp/master_weights.h"
#include "ember/parallel/checkpoint/checkpoint.h"
#include "ember/parallel/data_parallel/data_parallel.h"
#include "ember/parallel/data_parallel/parallel_apply.h"
#include "ember/parallel/data_parallel/replicate.h"
#include "ember/parallel/data_parallel/scatter_gather.h"
#include "ember/parallel/distributed/ddp/comm_hooks.h"
#include "ember/parallel/distributed/ddp/distributed_data_parallel.h"
#include "ember/parallel/distributed/ddp/sync_batch_norm.h"
#include "ember/parallel/distributed/init.h"
#include "ember/parallel/distributed/store/tcp_store.h"
