// parallel::Value: what DataParallel scatters to its replicas and gathers
// back. A Value is a Tensor, a list of Values (PyTorch's tuples and lists of
// tensors, nested to any depth), or None.
//
//   Value x = images;                                   // a tensor
//   Value pair = Value::list({images, Value::list({masks, lengths})});
//   pair[1][0].tensor()                                 // masks
//
// Contract: a Value is a cheap copy (tensors are handles; a list copies its
// handles). Asking for the wrong kind (tensor() of a list, [i] of a tensor,
// an index out of range) is an ember::Error that describes the value.
#pragma once

#include <string>
#include <variant>
#include <vector>

#include "ember/core/tensor.h"

namespace ember::parallel {

class Value {
 public:
  Value() = default;     // None
  Value(Tensor tensor);  // NOLINT: a Tensor is a Value
  static Value list(std::vector<Value> items);

  bool is_none() const { return std::holds_alternative<std::monostate>(v_); }
  bool is_tensor() const { return std::holds_alternative<Tensor>(v_); }
  bool is_list() const { return std::holds_alternative<std::vector<Value>>(v_); }

  const Tensor& tensor() const;
  const std::vector<Value>& items() const;
  size_t size() const { return items().size(); }
  const Value& operator[](size_t index) const;

  // Every tensor, depth first.
  TensorList tensors() const;
  // "tensor [4, 3] float32 on cpu", "list(tensor [4] int64 on cpu, none)".
  std::string str() const;

 private:
  std::variant<std::monostate, Tensor, std::vector<Value>> v_;
};

}  // namespace ember::parallel
