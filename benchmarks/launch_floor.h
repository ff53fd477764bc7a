// launch_floor: the CUDA runtime's own host cost of launching an empty
// kernel, the floor under the host overhead of any op that launches one.
//
// Contract: launch_empty_kernel(stream) enqueues one empty <<<1, 32>>>
// kernel on `stream` (a cudaStream_t, passed as void* so that .cpp files need
// not include the CUDA headers) and checks the launch with cudaGetLastError,
// as every ember launch does; a failure throws ember::Error. Built into
// host_overhead only with CUDA.
#pragma once

namespace ember::bench {

void launch_empty_kernel(void* stream);

}  // namespace ember::bench
