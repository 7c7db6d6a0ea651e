// A cluster's replicated log checked offline (hf3fs-meta-server --verify-ha-log), as
// --verify-data-dir checks a data dir: every entry, read at one revision, must be whole records
// with their checksums and numbers right (durable::LogReader), begin at the record after the entry
// before (check_follows), be keyed by its last record, and the last must end at the tip. Entries
// compacted away are not missed: the log begins where the oldest one left begins. It only reads.
#pragma once

#include <cstdint>
#include <string>

#include "ha/etcd_client.hpp"
#include "ha/keys.hpp"

namespace hf3fs_meta::server::ha {

struct LogVerdict {
  std::uint64_t entries = 0;
  std::uint64_t first_seq = 0;  // the oldest record the log holds (0: an empty log)
  std::uint64_t last_seq = 0;   // the newest (the tip, when sound)
  std::uint64_t bytes = 0;      // the entries' records
  std::int64_t revision = 0;    // the store's revision it was read at
  std::string problem;          // the first thing wrong; empty when the log is sound
};

// An error when etcd could not be read; a verdict otherwise. Reads `page` entries at a time.
EtcdResult<LogVerdict> verify_log(EtcdClient& etcd, const Keys& keys, std::int64_t page = 256);

}  // namespace hf3fs_meta::server::ha
