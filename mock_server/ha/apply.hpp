// A log entry applied to a member's state: recovery's replay (durable::replay_journal) on the
// entry's records, which are the leader's journal records, framing and seqs as they are. So a
// standby and a new leader rebuild the state through the one path a restart takes, and the
// request-id answers travel with the records (an allocate repeated to the new leader with the same
// X-Request-Id gets the same pages).
#pragma once

#include "durable/data_dir.hpp"
#include "ha/log.hpp"
#include "hf3fs_meta/state.hpp"

namespace hf3fs_meta::server::ha {

// Applies the records of `entry` after out.seq (the state's last change); the records up to it that
// the entry begins with are skipped. Advances `out` (its seq, and the tagged records' answers in
// out.dedup). An entry that begins after out.seq + 1 leaves a gap: an error saying the member needs
// a snapshot; one that ends at or before out.seq is refused too (nothing of it is new); anything
// else wrong names the entry and the record. `to_sink`: the records also go to
// the state's change sink (a member's journal), tagged as they were.
durable::Result<void> apply_entry(MetadataState& state, const LogEntry& entry, durable::Recovered& out,
                                  bool to_sink = false);

}  // namespace hf3fs_meta::server::ha
