// Deferred reports of out-of-range indices found on a GPU (see
// ember/core/cuda/index_error.h).
#include "ember/core/cuda/index_error.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <mutex>
#include <string>

#include "ember/core/cuda/cuda_check.h"
#include "ember/core/cuda/device.h"
#include "ember/core/error.h"
#include "ember/core/ops/index_kernels.h"

namespace ember::cuda {

namespace {

struct DeviceSlot {
  PendingIndexError* host = nullptr;    // mapped pinned memory
  PendingIndexError* device = nullptr;  // the same memory, as the device sees it
  unsigned long long* claim = nullptr;
};

struct CheckRecord {
  unsigned long long id = 0;
  const char* op = "";
  int64_t dim = 0;
  int64_t dim_size = 0;
  std::string context;
};

DeviceSlot slots[kMaxDevices];
std::once_flag slot_once[kMaxDevices];
std::atomic<int> slots_in_use{0};  // 1 + the highest device with a slot

std::atomic<unsigned long long> next_id{1};
std::mutex records_mutex;  // guards records and the reset of a slot
CheckRecord records[kCheckRecords];

// Fills the device's slot and publishes it: `host` is stored last (release),
// so a thread that loads it (acquire) sees `device` and `claim` too.
void make_slot(int device) {
  DeviceGuard guard(device);
  DeviceSlot& s = slots[device];
  void* host = nullptr;
  EMBER_CUDA_CHECK(cudaHostAlloc(&host, sizeof(PendingIndexError), cudaHostAllocMapped | cudaHostAllocPortable));
  *static_cast<PendingIndexError*>(host) = PendingIndexError{0, 0, 0};
  void* view = nullptr;
  EMBER_CUDA_CHECK(cudaHostGetDevicePointer(&view, host, 0));
  s.device = static_cast<PendingIndexError*>(view);
  void* claim = nullptr;
  EMBER_CUDA_CHECK(cudaMalloc(&claim, sizeof(unsigned long long)));
  EMBER_CUDA_CHECK(cudaMemset(claim, 0, sizeof(unsigned long long)));
  EMBER_CUDA_CHECK(cudaDeviceSynchronize());
  s.claim = static_cast<unsigned long long*>(claim);
  __atomic_store_n(&s.host, static_cast<PendingIndexError*>(host), __ATOMIC_RELEASE);
  int in_use = slots_in_use.load();
  while (in_use < device + 1 && !slots_in_use.compare_exchange_weak(in_use, device + 1)) {
  }
}

// The device's record once its slot is published, else nullptr.
PendingIndexError* published_record(const DeviceSlot& s) { return __atomic_load_n(&s.host, __ATOMIC_ACQUIRE); }

unsigned long long pending_id(const PendingIndexError* record) {
  return record == nullptr ? 0 : __atomic_load_n(&record->id, __ATOMIC_ACQUIRE);
}

[[noreturn]] void report(int device, const PendingIndexError& found, const CheckRecord* record) {
  std::string text = record != nullptr
                         ? index_error_text(record->op, record->dim, record->dim_size, found.value, record->context)
                         : "an indexing op: index " + std::to_string(found.value) + " is out of bounds";
  EMBER_FAIL(text << " (found on cuda:" << device << " at position " << found.position
                  << " of the index by the check of that call, which does not wait for the GPU, and raised at the "
                     "next call that waits for it or checks indices; EMBER_LAUNCH_BLOCKING=1 raises it in the op "
                     "itself)");
}

}  // namespace

void prepare_index_checks(int device) { std::call_once(slot_once[device], make_slot, device); }

IndexCheckTarget begin_index_check(int device, const char* op, int64_t dim, int64_t dim_size) {
  prepare_index_checks(device);
  IndexCheckTarget t;
  t.id = next_id.fetch_add(1);
  t.record = slots[device].device;
  t.claim = slots[device].claim;
  const std::string* context = IndexErrorContext::current();
  std::lock_guard<std::mutex> lock(records_mutex);
  CheckRecord& r = records[t.id % kCheckRecords];
  r.id = t.id;
  r.op = op;
  r.dim = dim;
  r.dim_size = dim_size;
  if (context != nullptr) r.context = *context;
  else r.context.clear();
  return t;
}

void raise_pending_index_error() {
  const int in_use = slots_in_use.load(std::memory_order_acquire);
  for (int device = 0; device < in_use; ++device) {
    const DeviceSlot& s = slots[device];
    PendingIndexError* pending = published_record(s);
    if (pending_id(pending) == 0) [[likely]]
      continue;
    std::unique_lock<std::mutex> lock(records_mutex);
    const unsigned long long id = pending_id(pending);
    if (id == 0) continue;  // another thread reported it
    const PendingIndexError found = *pending;
    const CheckRecord& r = records[id % kCheckRecords];
    const CheckRecord record = r;  // copied before the lock goes
    // The record is cleared before the claim is released: a check that wins
    // the claim after the release writes a record that stays to be raised.
    __atomic_store_n(&pending->id, 0ull, __ATOMIC_RELEASE);
    {
      DeviceGuard guard(device);
      const unsigned long long zero = 0;
      EMBER_CUDA_CHECK(cudaMemcpy(s.claim, &zero, sizeof(zero), cudaMemcpyHostToDevice));
    }
    lock.unlock();
    report(device, found, record.id == id ? &record : nullptr);
  }
}

}  // namespace ember::cuda
