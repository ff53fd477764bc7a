// The EMBER_DISTRIBUTED_DEBUG check (ember/parallel/distributed/debug_check.h).
#include "ember/parallel/distributed/debug_check.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "ember/core/error.h"

namespace ember::parallel {

namespace {

std::string signature_key(uint64_t seq, int rank) {
  return "debug/" + std::to_string(seq) + "/" + std::to_string(rank);
}

}  // namespace

bool distributed_debug_from_env() {
  const char* v = std::getenv("EMBER_DISTRIBUTED_DEBUG");
  if (v == nullptr || std::string(v).empty() || std::string(v) == "0") return false;
  if (std::string(v) == "1") return true;
  EMBER_FAIL("EMBER_DISTRIBUTED_DEBUG='" << v << "' is neither 0 nor 1 (1 checks before each collective that every "
                                         << "rank calls the same one with the same shapes and dtypes)");
}

void check_same_collective(CollectiveTracker& tracker, const Collective& c) {
  Store& store = tracker.store();
  const std::string mine = c.signature();
  store.set(signature_key(c.seq, tracker.rank()), mine);
  std::vector<std::string> keys;
  for (int r = 0; r < tracker.size(); ++r) keys.push_back(signature_key(c.seq, r));
  try {
    store.wait(keys, tracker.timeout());
  } catch (const Error& e) {
    EMBER_FAIL("EMBER_DISTRIBUTED_DEBUG: rank " << tracker.rank() << " of group " << tracker.group() << " calls "
                                                << c.str() << ", but not every rank reached collective #" << c.seq
                                                << " within " << tracker.timeout().count() << " ms. "
                                                << tracker.arrival_report(c) << ". (" << e.what() << ")");
  }
  std::vector<std::string> all;
  for (const std::string& k : keys) all.push_back(store.get(k));
  for (int r = 1; r < tracker.size(); ++r) {
    EMBER_CHECK(all[r] == all[0], "EMBER_DISTRIBUTED_DEBUG: the ranks of group "
                                      << tracker.group() << " call different collectives as #" << c.seq
                                      << ": rank 0 calls " << all[0] << ", but rank " << r << " calls " << all[r]
                                      << " (this is rank " << tracker.rank() << "). Every rank must call the same "
                                      << "collectives in the same order with the same shapes and dtypes");
  }
  // Every rank has published #seq, so each has read all of #seq - 1: this
  // rank's key for it is no longer needed.
  if (c.seq > 1) store.delete_key(signature_key(c.seq - 1, tracker.rank()));
}

}  // namespace ember::parallel
