// The CUDA cross-device copy kernel (cross_device_copy_stub, registered for
// DeviceType::CUDA): dense bytes between host and GPU or between GPUs, with
// cudaMemcpyAsync on the current stream of the CUDA side.
//
// Contract:
// - host -> device is asynchronous on the destination's current stream.
//   From pinned memory the bytes move later by DMA, so the copy records its
//   use of the pinned block (record_host_use) and the block is not reused
//   before the copy is done (ember/core/cuda/pinned_memory.h says what the caller
//   must not do meanwhile). From pageable memory the runtime stages the
//   bytes before cudaMemcpyAsync returns, so the source may be reused at once.
// - device -> host waits for the source's current stream before it returns,
//   so the host reads the copied bytes right away, pinned or not; an index
//   error found meanwhile on a GPU is raised then (ember/core/cuda/index_error.h).
// - device -> same device runs on that device's current stream.
// - device -> other device runs on the source's current stream, after the
//   work already queued on the destination's current stream (which may still
//   use the destination memory), and that stream waits for the copy: both
//   sides see the copy in their stream order. Peer access is enabled once per
//   pair of devices that supports it, so the copy goes over NVLink or PCIe
//   directly rather than through the host.
#include <mutex>

#include "ember/core/cuda/cuda_check.h"
#include "ember/core/cuda/device.h"
#include "ember/core/cuda/event.h"
#include "ember/core/cuda/graph.h"
#include "ember/core/cuda/index_error.h"
#include "ember/core/cuda/pinned_memory.h"
#include "ember/core/cuda/stream.h"
#include "ember/core/error.h"
#include "ember/core/ops/elementwise_kernels.h"

namespace ember::cuda {
namespace {

void enable_peer_access(int from, int to) {
  static std::once_flag once[kMaxDevices][kMaxDevices];
  std::call_once(once[from][to], [from, to] {
    int can = 0;
    EMBER_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, from, to));
    if (can == 0) return;  // cudaMemcpyPeerAsync still works, staged through the host
    DeviceGuard guard(from);
    const cudaError_t err = cudaDeviceEnablePeerAccess(to, 0);
    if (err == cudaErrorPeerAccessAlreadyEnabled) {
      cudaGetLastError();
      return;
    }
    EMBER_CUDA_CHECK(err);
  });
}

void host_to_device(void* dst, int device, const void* src, size_t nbytes) {
  detail::check_not_capturing(device, "a copy from the host to the GPU (to(device) of a CPU tensor)",
                              "every replay would copy the same host memory again, whatever it holds by then; "
                              "copy into a device tensor before each replay instead");
  const Stream stream = current_stream(device);
  DeviceGuard guard(device);
  EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, stream.handle()));
  record_host_use(src, stream);
}

void device_to_host(void* dst, const void* src, int device, size_t nbytes) {
  detail::check_not_capturing(device, "a copy from the GPU to the host (item(), cpu(), to(kCPU))",
                              "the host would wait for a value that is only computed at a replay");
  const Stream stream = current_stream(device);
  DeviceGuard guard(device);
  EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, stream.handle()));
  EMBER_CUDA_CHECK(cudaStreamSynchronize(stream.handle()));
  raise_pending_index_error();
}

void device_to_device(void* dst, int dst_device, const void* src, int src_device, size_t nbytes) {
  const Stream src_stream = current_stream(src_device);
  if (src_device == dst_device) {
    DeviceGuard guard(src_device);
    EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, src_stream.handle()));
    return;
  }
  const Stream dst_stream = current_stream(dst_device);
  enable_peer_access(src_device, dst_device);
  Event dst_ready;
  dst_ready.record(dst_stream);
  dst_ready.wait(src_stream);
  {
    DeviceGuard guard(src_device);
    EMBER_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device, src, src_device, nbytes, src_stream.handle()));
  }
  Event copied;
  copied.record(src_stream);
  copied.wait(dst_stream);
}

void cross_device_copy_cuda(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  EMBER_INTERNAL_ASSERT(dst_device.is_cuda() || src_device.is_cuda(),
                        "cross_device_copy (CUDA): neither side is a CUDA device ("
                            << src_device << " -> " << dst_device << "); a host copy is the CPU kernel's job");
  if (nbytes == 0) return;
  if (dst_device.is_cuda() && src_device.is_cuda()) {
    device_to_device(dst, dst_device.index, src, src_device.index, nbytes);
  } else if (dst_device.is_cuda()) {
    host_to_device(dst, dst_device.index, src, nbytes);
  } else {
    device_to_host(dst, src, src_device.index, nbytes);
  }
}

}  // namespace

EMBER_REGISTER_KERNEL(cross_device_copy_stub, DeviceType::CUDA, cross_device_copy_cuda);

}  // namespace ember::cuda
