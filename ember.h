// The one header an ember user includes. It pulls in no CUDA, cuDNN, NCCL
// or Eigen header.
#pragma once

#include "core/autograd/engine.h"
#include "core/autograd/node.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/grad_mode.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "core/cuda/device.h"
#include "data/data_loader.h"
#include "data/mnist.h"
#include "data/subset.h"
#include "data/tensor_dataset.h"
#include "nn/nn.h"
#include "nn/safetensors.h"
#include "optim/checkpoint.h"
#include "optim/optim.h"
#include "parallel/parallel.h"
