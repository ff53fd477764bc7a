// PrefixStore (ember/parallel/distributed/store/prefix_store.h): prefixes keys, forwards the rest.
#include "ember/parallel/distributed/store/prefix_store.h"

#include <utility>

#include "ember/core/error.h"

namespace ember::parallel {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> store)
    : Store(store ? store->timeout() : kDefaultStoreTimeout), prefix_(std::move(prefix)), store_(std::move(store)) {
  EMBER_CHECK(store_, "PrefixStore(\"" << prefix_ << "\"): the underlying store is null");
}

std::vector<std::string> PrefixStore::keys(const std::vector<std::string>& ks) const {
  std::vector<std::string> out;
  out.reserve(ks.size());
  for (const std::string& k : ks) out.push_back(key(k));
  return out;
}

void PrefixStore::set(const std::string& k, const std::string& value) { store_->set(key(k), value); }

std::string PrefixStore::get_for(const std::string& k, std::chrono::milliseconds timeout) {
  return store_->get(key(k), timeout);
}

int64_t PrefixStore::add(const std::string& k, int64_t delta) { return store_->add(key(k), delta); }

std::string PrefixStore::compare_set(const std::string& k, const std::string& expected, const std::string& desired) {
  return store_->compare_set(key(k), expected, desired);
}

void PrefixStore::wait_for(const std::vector<std::string>& ks, std::chrono::milliseconds timeout) {
  store_->wait(keys(ks), timeout);
}

bool PrefixStore::check(const std::vector<std::string>& ks) { return store_->check(keys(ks)); }

bool PrefixStore::delete_key(const std::string& k) { return store_->delete_key(key(k)); }

int64_t PrefixStore::num_keys() { return store_->num_keys(); }

}  // namespace ember::parallel
