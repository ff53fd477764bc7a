// The EMBER_DISTRIBUTED_DEBUG=1 check: before each collective, every rank
// publishes the collective's signature (op, reduction, root, shapes, dtypes,
// device type) in the group's store and compares it with every other
// rank's, so that a mismatch is reported by rank instead of hanging or
// corrupting data. Used by ProcessGroup.
//
// Contract:
// - Every rank throws the same ember::Error for a mismatch: the collective's
//   number, the first rank (lowest) whose signature differs from rank 0's,
//   and both signatures.
// - Ranks that do not reach the collective within the group's timeout are
//   named (with the last collective they started), not waited for forever.
// - Costs a store round trip per rank and collective: a debugging aid, off
//   by default.
#pragma once

#include "ember/parallel/distributed/collective.h"
#include "ember/parallel/distributed/collective_tracker.h"

namespace ember::parallel {

// Whether EMBER_DISTRIBUTED_DEBUG asks for the check: unset, "" or "0" is
// off, "1" on; anything else is an ember::Error.
bool distributed_debug_from_env();

void check_same_collective(CollectiveTracker& tracker, const Collective& c);

}  // namespace ember::parallel
