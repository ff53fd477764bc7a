// Store: the key-value store the ranks of a job meet through. Process groups
// use it to rendezvous (the Gloo context's addresses, later the NCCL unique
// id), to check that ranks call the same collectives (EMBER_DISTRIBUTED_DEBUG)
// and to find out which ranks did not arrive at a collective that timed out.
//
// Contract (every implementation):
// - Keys are strings; values are byte strings (std::string holds any bytes).
// - Every call is thread-safe and never waits longer than its timeout: get()
//   and wait() throw an ember::Error naming the key(s) still missing and the
//   timeout; a store that cannot be reached throws an ember::Error saying
//   where it was expected.
// - add(key, delta) treats the value as a decimal integer (a missing key is
//   0), adds delta atomically and returns the new value; get() then reads the
//   decimal text ("3"), as in PyTorch. add() on a value that is not an
//   integer is an ember::Error.
// - compare_set(key, expected, desired) atomically stores desired when the
//   current value equals expected, where a missing key matches an empty
//   expected; it returns the value stored afterwards (empty when the key
//   still does not exist).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ember::parallel {

// PyTorch's default store timeout.
inline constexpr std::chrono::milliseconds kDefaultStoreTimeout = std::chrono::minutes(5);

class Store {
 public:
  explicit Store(std::chrono::milliseconds timeout = kDefaultStoreTimeout) : timeout_ms_(timeout.count()) {}
  virtual ~Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  virtual void set(const std::string& key, const std::string& value) = 0;
  // The value of key, waiting up to timeout() (or the given timeout) for it
  // to be set.
  std::string get(const std::string& key) { return get_for(key, timeout()); }
  std::string get(const std::string& key, std::chrono::milliseconds timeout) { return get_for(key, timeout); }
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  virtual std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) = 0;
  // Waits until every key exists.
  void wait(const std::vector<std::string>& keys) { wait_for(keys, timeout()); }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) { wait_for(keys, timeout); }
  // Whether every key exists now (does not wait).
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Removes key; false when it did not exist.
  virtual bool delete_key(const std::string& key) = 0;
  virtual int64_t num_keys() = 0;

  // The timeout of get(key) and wait(keys).
  std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(timeout_ms_.load()); }
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ms_ = timeout.count(); }

 protected:
  virtual std::string get_for(const std::string& key, std::chrono::milliseconds timeout) = 0;
  virtual void wait_for(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;

 private:
  std::atomic<int64_t> timeout_ms_;
};

}  // namespace ember::parallel
