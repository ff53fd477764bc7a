// parallel::Value: accessors and printing.
#include "ember/parallel/data_parallel/value.h"

#include "ember/core/error.h"
#include "ember/core/ops/op_utils.h"

namespace ember::parallel {

Value::Value(Tensor tensor) : v_(std::move(tensor)) {
  EMBER_CHECK(std::get<Tensor>(v_).defined(), "parallel::Value: got an undefined tensor; use Value() for None");
}

Value Value::list(std::vector<Value> items) {
  Value v;
  v.v_ = std::move(items);
  return v;
}

const Tensor& Value::tensor() const {
  EMBER_CHECK(is_tensor(), "parallel::Value: expected a tensor but the value is " << str());
  return std::get<Tensor>(v_);
}

const std::vector<Value>& Value::items() const {
  EMBER_CHECK(is_list(), "parallel::Value: expected a list but the value is " << str());
  return std::get<std::vector<Value>>(v_);
}

const Value& Value::operator[](size_t index) const {
  const std::vector<Value>& xs = items();
  EMBER_CHECK(index < xs.size(), "parallel::Value: index " << index << " is out of range for " << str());
  return xs[index];
}

TensorList Value::tensors() const {
  TensorList out;
  if (is_tensor()) out.push_back(tensor());
  if (is_list()) {
    for (const Value& item : items()) {
      TensorList inner = item.tensors();
      out.insert(out.end(), inner.begin(), inner.end());
    }
  }
  return out;
}

std::string Value::str() const {
  if (is_none()) return "none";
  if (is_tensor()) return "tensor " + detail::describe(tensor());
  std::string s = "list(";
  const auto& xs = std::get<std::vector<Value>>(v_);
  for (size_t i = 0; i < xs.size(); ++i) s += (i ? ", " : "") + xs[i].str();
  return s + ")";
}

}  // namespace ember::parallel
