// PrefixStore: a view of another Store whose keys all live under
// "<prefix>/", so that process groups sharing one TCPStore never see each
// other's keys.
//
// Contract: every call goes to the underlying store with the key prefixed;
// num_keys() counts the keys of the whole underlying store (a store cannot
// list keys). The timeout starts as the underlying store's and is this
// view's own afterwards.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ember/parallel/distributed/store/store.h"

namespace ember::parallel {

class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> store);

  void set(const std::string& key, const std::string& value) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;

  const std::string& prefix() const { return prefix_; }
  const std::shared_ptr<Store>& underlying() const { return store_; }

 protected:
  std::string get_for(const std::string& key, std::chrono::milliseconds timeout) override;
  void wait_for(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

 private:
  std::string key(const std::string& k) const { return prefix_ + "/" + k; }
  std::vector<std::string> keys(const std::vector<std::string>& ks) const;

  std::string prefix_;
  std::shared_ptr<Store> store_;
};

}  // namespace ember::parallel
