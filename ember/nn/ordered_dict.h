// OrderedDict: a string-keyed map that iterates in insertion order.
//
// The name -> value maps of nn (named_parameters, named_buffers,
// named_children, state_dict) are OrderedDicts, so their order is the
// order in which modules registered their members, on every run. Lookup by
// key is a hash probe; iteration yields Item{key, value} in order.
// A missing key in at() is an ember::Error naming the key.
#pragma once

#include <cstddef>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ember/core/error.h"

namespace ember::nn {

template <typename V>
class OrderedDict {
 public:
  struct Item {
    std::string key;
    V value;
  };

  OrderedDict() = default;
  OrderedDict(std::initializer_list<std::pair<std::string, V>> items) {
    for (const auto& [k, v] : items) insert(k, v);
  }

  // Adds key -> value at the end; an existing key is an error.
  void insert(std::string key, V value) {
    EMBER_CHECK(!index_.count(key), "OrderedDict: the key '" << key << "' is already present");
    index_.emplace(key, items_.size());
    items_.push_back(Item{std::move(key), std::move(value)});
  }
  // Adds key -> value at the end, or replaces the value of an existing key
  // in place (keeping its position).
  void insert_or_assign(std::string key, V value) {
    auto it = index_.find(key);
    if (it != index_.end()) {
      items_[it->second].value = std::move(value);
      return;
    }
    insert(std::move(key), std::move(value));
  }

  // Removes key and returns its value; the others keep their order. A
  // missing key is an error.
  V erase(const std::string& key) {
    const size_t at = position(key);
    V value = std::move(items_[at].value);
    items_.erase(items_.begin() + std::ptrdiff_t(at));
    index_.erase(key);
    for (auto& [k, i] : index_) {
      if (i > at) --i;
    }
    return value;
  }
  void clear() {
    items_.clear();
    index_.clear();
  }

  bool contains(const std::string& key) const { return index_.count(key) != 0; }
  const V& at(const std::string& key) const { return items_[position(key)].value; }
  V& at(const std::string& key) { return items_[position(key)].value; }
  const V& operator[](const std::string& key) const { return at(key); }
  V& operator[](const std::string& key) { return at(key); }
  const V* find(const std::string& key) const {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &items_[it->second].value;
  }

  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  std::vector<std::string> keys() const {
    std::vector<std::string> out;
    out.reserve(items_.size());
    for (const Item& i : items_) out.push_back(i.key);
    return out;
  }
  std::vector<V> values() const {
    std::vector<V> out;
    out.reserve(items_.size());
    for (const Item& i : items_) out.push_back(i.value);
    return out;
  }

  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }
  auto begin() { return items_.begin(); }
  auto end() { return items_.end(); }

 private:
  size_t position(const std::string& key) const {
    auto it = index_.find(key);
    EMBER_CHECK(it != index_.end(), "OrderedDict: no key '" << key << "' (" << items_.size() << " keys present)");
    return it->second;
  }

  std::vector<Item> items_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace ember::nn
