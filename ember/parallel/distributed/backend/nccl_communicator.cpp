// The nccl backend's communicator (contract in
// ember/parallel/distributed/backend/nccl_communicator.h).
#include "ember/parallel/distributed/backend/nccl_communicator.h"

#include <cstring>
#include <future>
#include <memory>
#include <thread>
#include <utility>

#include "ember/core/cuda/device.h"
#include "ember/core/cuda/nccl_check.h"
#include "ember/core/error.h"

namespace ember::parallel::detail {

std::string async_error_text(ncclComm_t comm, ncclResult_t state) {
  std::string s = std::string("NCCL reported an asynchronous error: ") + ncclGetErrorString(state);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') s += " (" + std::string(last) + ")";
  s += "; rerun with NCCL_DEBUG=INFO for NCCL's own log";
  if (state == ncclSystemError || state == ncclRemoteError) s += ", and check that every rank is alive";
  return s;
}

bool still_in_progress(ncclComm_t comm) {
  ncclResult_t state = ncclSuccess;
  EMBER_NCCL_CHECK(ncclCommGetAsyncError(comm, &state));
  if (state == ncclInProgress) return true;
  EMBER_CHECK(state == ncclSuccess, async_error_text(comm, state));
  return false;
}

std::string abort_within(ncclComm_t comm, std::chrono::milliseconds limit) {
  auto outcome = std::make_shared<std::promise<std::string>>();
  std::future<std::string> result = outcome->get_future();
  std::thread([comm, outcome] {
    try {
      EMBER_NCCL_CHECK(ncclCommAbort(comm));
      outcome->set_value("");
    } catch (const std::exception& e) {
      outcome->set_value(e.what());
    }
  }).detach();
  if (result.wait_for(limit) != std::future_status::ready) {
    return "ncclCommAbort did not return within " + std::to_string(limit.count()) +
           " ms and was left running in the background";
  }
  return result.get();
}

ncclComm_t connect_communicator(Store& store, int rank, int size, int device, const std::string& name,
                                std::chrono::milliseconds timeout, const std::string& where) {
  ncclUniqueId id;
  try {
    if (rank == 0) {
      EMBER_NCCL_CHECK(ncclGetUniqueId(&id));
      store.set("nccl/unique_id", std::string(id.internal, sizeof(id.internal)));
    } else {
      std::string value = store.get("nccl/unique_id");
      EMBER_CHECK(value.size() == sizeof(id.internal), "the NCCL unique id in the store has "
                                                           << value.size() << " bytes, not " << sizeof(id.internal)
                                                           << " (rank 0 runs another NCCL version?)");
      std::memcpy(id.internal, value.data(), sizeof(id.internal));
    }
    store.set("nccl/init/" + std::to_string(rank), "1");
  } catch (const std::exception& e) {
    EMBER_FAIL(where << ": handing NCCL's unique id from rank 0 to the others failed: " << e.what());
  }

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = name.c_str();  // names the communicator in NCCL_DEBUG's log
  ncclComm_t c = nullptr;
  cuda::DeviceGuard guard(device);  // NCCL makes the communicator on the current device
  const auto start = Clock::now();
  bool pending = false;
  try {
    pending = EMBER_NCCL_CHECK_ASYNC(ncclCommInitRankConfig(&c, size, id, rank, &config));
    while (pending && Clock::now() - start < timeout) {
      std::this_thread::sleep_for(kNcclSpinInterval);
      pending = still_in_progress(c);
    }
  } catch (const std::exception& e) {
    if (c != nullptr) abort_within(c, timeout);
    EMBER_FAIL(where << ": creating the NCCL communicator failed: " << e.what()
                     << ". If two ranks share a GPU: each needs its own; call cuda::set_device(LOCAL_RANK) before "
                     << "making the group, or set ProcessGroupOptions::nccl_device");
  }
  if (pending) {
    abort_within(c, timeout);
    std::string missing;
    try {
      for (int r = 0; r < size; ++r) {
        if (!store.check({"nccl/init/" + std::to_string(r)}))
          missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
    } catch (const std::exception& e) {
      missing = std::string("unknown (the store cannot be reached: ") + e.what() + ")";
    }
    EMBER_FAIL(where << ": creating the NCCL communicator did not finish within the timeout of " << timeout.count()
                     << " ms, and was aborted. "
                     << (missing.empty() ? "Every rank started creating it (NCCL's connections between them "
                                           "failed: rerun with NCCL_DEBUG=INFO)"
                                         : "Ranks that never started creating it: " + missing));
  }
  return c;
}

std::string Communicator::error_locked() {
  if (comm == nullptr) return "";
  ncclResult_t state = ncclSuccess;
  EMBER_NCCL_CHECK(ncclCommGetAsyncError(comm, &state));
  return state == ncclSuccess || state == ncclInProgress ? "" : async_error_text(comm, state);
}

std::optional<bool> Communicator::healthy() {
  std::unique_lock<std::mutex> lock(mutex, std::try_to_lock);
  if (!lock.owns_lock()) return std::nullopt;
  return !failed && error_locked().empty();
}

std::string Communicator::abort(std::chrono::milliseconds limit) {
  ncclComm_t c = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex);
    failed = true;
    c = std::exchange(comm, nullptr);
  }
  return c == nullptr ? "" : abort_within(c, limit);
}

void Communicator::close(std::chrono::milliseconds timeout) noexcept {
  std::lock_guard<std::mutex> lock(mutex);
  if (comm == nullptr) return;
  ncclComm_t c = std::exchange(comm, nullptr);
  bool finalized = false;
  try {
    bool pending = EMBER_NCCL_CHECK_ASYNC(ncclCommFinalize(c));
    const auto start = Clock::now();
    while (pending && Clock::now() - start < timeout) {
      std::this_thread::sleep_for(kNcclSpinInterval);
      pending = still_in_progress(c);
    }
    finalized = !pending;
  } catch (const std::exception&) {  // finalizing failed: aborting frees what is left
  }
  try {
    if (finalized) {
      EMBER_NCCL_CHECK(ncclCommDestroy(c));  // local once finalized: does not wait for the peers
    } else {
      abort_within(c, timeout);
    }
  } catch (const std::exception&) {  // a destructor has no one to tell
  }
}

}  // namespace ember::parallel::detail
