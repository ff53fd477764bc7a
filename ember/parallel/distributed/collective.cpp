// The names and descriptions of collectives (ember/parallel/distributed/collective.h).
#include "ember/parallel/distributed/collective.h"

#include <sstream>

namespace ember::parallel {

namespace {

// "[4, 3] float32", and ", [5] float32" for more: the tensors of a list,
// with the device written once (they share it; ProcessGroup checks that).
void list_tensors(std::ostringstream& os, const TensorList& tensors) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    os << (i ? ", " : "") << shape_str(tensors[i].shape()) << " " << dtype_name(tensors[i].dtype());
  }
}

std::string describe(const Collective& c, bool with_seq, bool with_index) {
  std::ostringstream os;
  os << collective_name(c.kind);
  if (with_seq) os << " #" << c.seq;
  switch (c.kind) {
    case CollectiveKind::AllReduce: os << (with_seq ? " (" : "(") << reduce_op_name(c.op) << ") of "; break;
    case CollectiveKind::ReduceScatter:
      os << (with_seq ? " (" : "(") << reduce_op_name(c.op) << ") of " << c.per_rank.size() << " inputs ";
      break;
    case CollectiveKind::Broadcast: os << " from rank " << c.root << " of "; break;
    case CollectiveKind::AllGather: os << " of "; break;
    case CollectiveKind::Barrier: return os.str();
  }
  if (c.kind == CollectiveKind::ReduceScatter) {
    list_tensors(os, TensorList(c.per_rank.begin(), c.per_rank.begin() + std::min<size_t>(1, c.per_rank.size())));
    os << " into ";
  } else if (c.tensors.size() > 1) {
    os << c.tensors.size() << " tensors ";
  }
  list_tensors(os, c.tensors);
  if (c.kind == CollectiveKind::AllGather) os << " into " << c.per_rank.size() << " outputs";
  if (!c.tensors.empty()) {
    Device d = c.tensors[0].device();
    os << " on " << (with_index ? d.str() : (d.is_cuda() ? "cuda" : "cpu"));
  }
  return os.str();
}

}  // namespace

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "unknown";
}

const char* collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::AllReduce: return "all_reduce";
    case CollectiveKind::Broadcast: return "broadcast";
    case CollectiveKind::AllGather: return "all_gather";
    case CollectiveKind::ReduceScatter: return "reduce_scatter";
    case CollectiveKind::Barrier: return "barrier";
  }
  return "unknown";
}

std::string Collective::signature() const { return describe(*this, false, false); }

std::string Collective::str() const { return describe(*this, true, true); }

}  // namespace ember::parallel
