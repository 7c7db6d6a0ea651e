// A member whose data dir the replicated log no longer continues (it was down while the leader
// compacted the log past its last snapshot, or its data dir is new and the log no longer starts at
// record 1) gets the leader's newest snapshot (GET /_ha/snapshot) before its Store opens, and
// follows the log from there. Only at start: a running standby that falls behind the compaction
// (its lease lapsed while it lived) says so in its log and is restarted to catch up.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>

#include "ha/etcd_client.hpp"
#include "ha/keys.hpp"

namespace hf3fs_meta::server::ha {

struct SnapshotFetchOptions {
  std::string auth_token;  // the server's --auth-token-file token: the route is an operator's
  // A leader that serves HTTPS is checked against the system's CAs (the server has no CA flag).
  std::chrono::milliseconds wait_for_leader{30000};
  std::chrono::milliseconds transfer_timeout{120000};
};

// The seq of the snapshot installed into `dir`; 0 when the log continues the data dir as it is.
// An error when etcd does not answer, or no leader gave a whole snapshot in time.
EtcdResult<std::uint64_t> fetch_snapshot_if_behind(EtcdClient& etcd, const Keys& keys, const std::filesystem::path& dir,
                                                   const SnapshotFetchOptions& options);

}  // namespace hf3fs_meta::server::ha
