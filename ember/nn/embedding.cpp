// Embedding: the table and forward through ember::embedding.
#include "ember/nn/embedding.h"

#include "ember/core/ops.h"
#include "ember/nn/init.h"

namespace ember::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim)
    : num_embeddings(num_embeddings), embedding_dim(embedding_dim) {
  EMBER_CHECK(num_embeddings > 0 && embedding_dim > 0,
              "Embedding: num_embeddings and embedding_dim must be positive, got " << num_embeddings << " and "
                                                                                   << embedding_dim);
  weight = register_parameter("weight", empty({num_embeddings, embedding_dim}));
  reset_parameters();
}

void Embedding::reset_parameters() { init::normal_(weight); }

Tensor Embedding::forward(const Tensor& indices) { return embedding(weight, indices); }

std::shared_ptr<Module> Embedding::clone() const { return clone_as<Embedding>(num_embeddings, embedding_dim); }

std::string Embedding::extra_repr() const {
  return std::to_string(num_embeddings) + ", " + std::to_string(embedding_dim);
}

}  // namespace ember::nn
