// The CPU allocator and its cache of large blocks (see ember/core/cpu_allocator.h).
#include "ember/core/cpu_allocator.h"

#include <pthread.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "ember/core/error.h"

#if defined(__SANITIZE_ADDRESS__)
#define EMBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMBER_ASAN 1
#endif
#endif

namespace ember {
namespace {

size_t size_class(size_t nbytes) {
  if (nbytes < kCpuCacheMinBytes) return (nbytes + 63) / 64 * 64;
  size_t pow2 = kCpuCacheMinBytes;
  while (pow2 < nbytes) pow2 <<= 1;
  const size_t step = pow2 / 8;
  return (nbytes + step - 1) / step * step;
}

size_t cache_limit_bytes() {
#ifdef EMBER_ASAN
  return 0;
#else
  const char* env = std::getenv("EMBER_CPU_CACHE_MB");
  if (env == nullptr || *env == '\0') return size_t(1024) << 20;
  char* end = nullptr;
  const unsigned long long mb = std::strtoull(env, &end, 10);
  EMBER_CHECK(*end == '\0',
              "EMBER_CPU_CACHE_MB: expected a number of mebibytes (0 turns the CPU cache off), got '" << env << "'");
  return size_t(mb) << 20;
#endif
}

// Leaked on purpose: tensors freed during static destruction still find it.
struct LargeBlockCache {
  std::mutex mutex;
  std::unordered_map<void*, size_t> live;               // handed-out large block -> its class
  std::unordered_map<size_t, std::vector<void*>> free;  // class -> cached blocks
  size_t cached = 0;
  const size_t limit = cache_limit_bytes();

  static LargeBlockCache& get() {
    static LargeBlockCache* cache = [] {
      auto* c = new LargeBlockCache;
      pthread_atfork([] { get().mutex.lock(); }, [] { get().mutex.unlock(); }, [] { get().mutex.unlock(); });
      return c;
    }();
    return *cache;
  }

  void* take(size_t cls) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = free.find(cls);
    if (it == free.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    cached -= cls;
    live.emplace(p, cls);
    return p;
  }

  void record(void* p, size_t cls) {
    std::lock_guard<std::mutex> lock(mutex);
    live.emplace(p, cls);
  }

  void give_back(void* p) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      auto it = live.find(p);
      const size_t cls = it->second;
      live.erase(it);
      if (cached + cls <= limit) {
        free[cls].push_back(p);
        cached += cls;
        return;
      }
    }
    std::free(p);
  }

  void empty() {
    std::vector<void*> blocks;
    {
      std::lock_guard<std::mutex> lock(mutex);
      for (auto& [cls, list] : free) blocks.insert(blocks.end(), list.begin(), list.end());
      free.clear();
      cached = 0;
    }
    for (void* p : blocks) std::free(p);
  }
};

void free_large(void* p) { LargeBlockCache::get().give_back(p); }

class CpuAllocator final : public Allocator {
 public:
  DataPtr allocate(size_t nbytes, Device) override {
    if (nbytes == 0) return DataPtr(nullptr, &std::free);
    const size_t cls = size_class(nbytes);
    LargeBlockCache& cache = LargeBlockCache::get();
    const bool large = cls >= kCpuCacheMinBytes && cache.limit > 0;
    void* p = large ? cache.take(cls) : nullptr;
    if (p == nullptr) {
      p = std::aligned_alloc(64, cls);
      if (p == nullptr && large) {
        cache.empty();
        p = std::aligned_alloc(64, cls);
      }
      if (p == nullptr) {
        throw OutOfMemoryError("CPU allocator: cannot allocate " + std::to_string(nbytes) +
                               " bytes of host memory; lower the batch size or the model size");
      }
      if (large) cache.record(p, cls);
    }
    if (allocation_poisoning()) std::memset(p, 0xFF, cls);
    return DataPtr(p, large ? &free_large : &std::free);
  }
};

}  // namespace

Allocator& cpu_allocator() {
  static CpuAllocator cpu;
  return cpu;
}

size_t cpu_cached_bytes() {
  LargeBlockCache& cache = LargeBlockCache::get();
  std::lock_guard<std::mutex> lock(cache.mutex);
  return cache.cached;
}

void cpu_empty_cache() { LargeBlockCache::get().empty(); }

}  // namespace ember
