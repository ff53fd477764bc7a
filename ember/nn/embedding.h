// Embedding: a lookup table of num_embeddings vectors of embedding_dim, as
// torch.nn.Embedding.
//
// Input: integer indices (int64 or int32) of any shape, each in
// [0, num_embeddings); output indices.shape + [embedding_dim]. A bad index
// is an ember::Error naming it (on CPU and CUDA). weight starts as N(0, 1),
// PyTorch's initialization; its gradient adds up over repeated indices.
// The op is ember::embedding.
#pragma once

#include "ember/nn/module.h"

namespace ember::nn {

class Embedding : public UnaryModule {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim);

  Tensor forward(const Tensor& indices) override;
  std::shared_ptr<Module> clone() const override;
  std::string extra_repr() const override;  // "10, 3", as PyTorch
  void reset_parameters();

  const int64_t num_embeddings;
  const int64_t embedding_dim;
  Tensor weight;  // (num_embeddings, embedding_dim)

 protected:
  void parameter_replaced(const std::string&, const Tensor& parameter) override { weight = parameter; }
};

}  // namespace ember::nn
