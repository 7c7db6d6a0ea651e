// A member whose data dir the replicated log no longer continues gets the leader's newest snapshot
// (GET /_ha/snapshot) and follows the log from there: at start, before its Store opens (its data dir
// is new and the log no longer starts at record 1, or it was down while the leader compacted the
// log past its last snapshot), and while it runs (its lease lapsed long enough for the compaction
// to pass it: Store::install_snapshot).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>

#include "durable/data_dir.hpp"
#include "ha/etcd_client.hpp"
#include "ha/keys.hpp"

namespace hf3fs_meta::server::ha {

struct SnapshotFetchOptions {
  std::string auth_token;  // the server's --auth-token-file token: the route is an operator's
  // A leader that serves HTTPS is checked against the system's CAs (the server has no CA flag).
  std::chrono::milliseconds wait_for_leader{30000};
  std::chrono::milliseconds transfer_timeout{120000};
};

// One attempt: the newest snapshot of the leader etcd names, downloaded into the data dir `dir` as it
// comes (durable::kFetchedSnapshotName, removed once mapped). An error says why not (etcd does not
// answer, no leader, the leader did not give one).
EtcdResult<durable::FileBytes> fetch_leader_snapshot(EtcdClient& etcd, const Keys& keys,
                                                    const std::filesystem::path& dir,
                                                    const SnapshotFetchOptions& options);

// Before the Store opens: the seq of the snapshot installed into `dir`, attempts repeated for up to
// options.wait_for_leader; 0 when the log continues the data dir as it is.
// An error when etcd does not answer, or no leader gave a whole snapshot in time.
EtcdResult<std::uint64_t> fetch_snapshot_if_behind(EtcdClient& etcd, const Keys& keys, const std::filesystem::path& dir,
                                                   const SnapshotFetchOptions& options);

}  // namespace hf3fs_meta::server::ha
