// The data directory of a durable server: the lock, snapshots, and recovery (docs/design.md, "Data dir", "Snapshots", "Recovery").
//
// DIR/LOCK                       flock()ed by the server using DIR; holds its PID
// DIR/snapshot-<seq>.snap        a full image at change <seq>, and the live dedup entries (snapshot.hpp)
// DIR/journal-<first seq>.log    the records from <first seq> on (log_format.hpp, record.hpp)
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "durable/error.hpp"
#include "durable/record.hpp"
#include "hf3fs_meta/state.hpp"

namespace hf3fs_meta::durable {

// errno's text; and write(2) of all of `bytes` (repeated on EINTR and short writes), 0 or the errno.
std::string errno_text(int err);
int write_all(int fd, std::string_view bytes);

// Disk errors on demand, so that the error paths run in every test run (unit tests, and the server's
// fault route with --enable-fault-injection): the next `times` operations `op` fail with `err`
// (ENOSPC, EIO...) without touching the disk. Process-wide.
enum class DiskOp { journal_write, journal_sync, snapshot_write };
void inject_disk_error(DiskOp op, int err, std::int64_t times);
void clear_disk_errors() noexcept;
// 0, or the errno the operation is to fail with (counted down). One relaxed load when none is set.
int take_injected_error(DiskOp op) noexcept;

std::string journal_name(std::uint64_t first_seq);
std::string snapshot_name(std::uint64_t seq);

// What recovery found.
struct Recovered {
  std::uint64_t seq = 0;            // the last change recovered
  std::uint64_t snapshot_seq = 0;   // 0: no snapshot
  std::size_t records = 0;          // journal records replayed
  std::vector<DedupEntry> dedup;    // request-id answers in seq order, from the snapshot and the journal
  std::filesystem::path journal;    // the last journal file (empty: none)
  std::uint64_t journal_first_seq = 0;
  std::uint64_t journal_valid_bytes = 0;  // where the next record goes
  std::optional<std::string> cut;   // a torn last record: what was cut, where
  std::uint64_t cut_bytes = 0;      // how many bytes that was
  std::vector<std::filesystem::path> removed_temporaries;  // by Store::open: interrupted snapshots
  std::uint64_t journal_bytes = 0;  // journal bytes replayed (all files)
};

// Loads the newest snapshot and replays the journal after it into `state` (which must be empty).
// A torn record at the very end of the last journal is left out (and reported in `cut`); anything
// else wrong is an error naming the file and offset, with `state` unusable.
Result<Recovered> recover(const std::filesystem::path& dir, MetadataState& state);

// The journal replay recover() uses, on the bytes of one file (a fuzz target calls it directly; the
// snapshot's reader is read_snapshot, snapshot.hpp). Replays one journal file into `state`, its first
// record following out.seq, and advances `out`. In the `last` file a torn record at the end is left
// out (reported in out.cut); anything else wrong is an error naming the file and the offset.
// `first_seq` (0: out.seq + 1) is the number of the bytes' first record; records up to out.seq are
// skipped (a replicated log's entry may begin before what a member already has, ha/apply.hpp).
// `to_sink`: each record also goes to the state's change sink, with its request-id tag, so that an
// HA standby's journal holds the log's records as the leader wrote them (MetadataState::apply).
Result<void> replay_journal(const std::filesystem::path& path, std::string_view bytes, bool last,
                            MetadataState& state, Recovered& out, std::uint64_t first_seq = 0,
                            bool to_sink = false);

// An HA member trusts its data dir only up to its newest snapshot (every snapshot it wrote holds
// only changes the replicated log has): its journal after that may hold records the log never
// took. Cuts every journal file after the newest snapshot back to its header, so that recovery ends
// at the snapshot; returns the snapshot's seq (0: none, and every journal file is cut).
Result<std::uint64_t> cut_journal_after_snapshot(const std::filesystem::path& dir);

// A file's bytes, mapped read-only: recovery reads hundreds of megabytes, which a read() would copy
// into freshly zeroed memory first, and an HA leader sends its snapshot from the page cache without
// a copy on the heap. The mapping keeps the file's bytes even once it is removed. Only the server
// holding the data dir's LOCK changes its files (a --verify-data-dir beside a running server may see
// a journal the server is appending to).
class FileBytes {
 public:
  FileBytes() = default;  // no bytes
  FileBytes(void* data, std::size_t size) : data_(data), size_(size) {}
  FileBytes(FileBytes&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  FileBytes& operator=(FileBytes&&) = delete;
  ~FileBytes();
  std::string_view bytes() const noexcept { return {static_cast<const char*>(data_), size_}; }

 private:
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

// `populate`: every page read in at once (recovery reads them all); otherwise as they are read.
Result<FileBytes> read_file(const std::filesystem::path& path, bool populate = true);

// The newest snapshot file as written, mapped (an HA leader sends it, GET /_ha/snapshot, as it reads
// it); no bytes when there is none.
Result<FileBytes> map_newest_snapshot(const std::filesystem::path& dir);

// Where an HA member downloads the leader's snapshot before installing it (install_snapshot); a
// crash's leftover goes with the interrupted snapshots (remove_temporaries).
inline constexpr std::string_view kFetchedSnapshotName = "snapshot-fetched.snap.tmp";
// The seq of the newest snapshot in `dir` (0: none, or no such directory).
std::uint64_t newest_snapshot_seq(const std::filesystem::path& dir);
// An HA member behind its cluster's compacted log, before its Store opens: `bytes` (a snapshot file,
// map_newest_snapshot's) become the data dir's newest snapshot, with an empty journal after it, and
// what came before goes. Returns the snapshot's seq. The bytes are checked first: nothing changes
// when they are not a whole snapshot, or (Errc::inconsistent) one of no change past `after`.
Result<std::uint64_t> install_snapshot(const std::filesystem::path& dir, std::string_view bytes,
                                       std::uint64_t after = 0);

// Removes the snapshots older than `seq` and the journal files whose records all come before it.
void remove_before(const std::filesystem::path& dir, std::uint64_t seq);

// Removes what an interrupted snapshot or snapshot download left (snapshot-*.snap.tmp); returns the
// files removed.
std::vector<std::filesystem::path> remove_temporaries(const std::filesystem::path& dir);

// fsync of a directory (after creating, renaming or removing a file in it).
Result<void> sync_dir(const std::filesystem::path& dir);

// flock() on the directory itself (deleting a file cannot break it); DIR/LOCK holds our PID, for the
// message a second server gets. Held until destroyed.
class DirLock {
 public:
  static Result<DirLock> acquire(const std::filesystem::path& dir);
  DirLock(DirLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  DirLock& operator=(DirLock&&) = delete;
  ~DirLock();

 private:
  explicit DirLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace hf3fs_meta::durable
