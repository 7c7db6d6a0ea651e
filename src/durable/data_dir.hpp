// The data directory of a durable server: the lock, snapshots, and recovery (DESIGN.md, Durability).
//
// DIR/LOCK                       flock()ed by the server using DIR; holds its PID
// DIR/snapshot-<seq>.snap        a full image at change <seq>, and the live dedup entries
// DIR/journal-<first seq>.log    the records from <first seq> on (record.hpp)
//
// snapshot file: file header "HF3FSSNP", then u64 seq, u32 ranks, per rank: u64 rank, u32 num_pages,
// u64 kept_on_release, u32 free_count, the pool (u32 each, front first), the page table (u32 each),
// u32 allocated pages, the hash of each one's key (u32 each, in page order);
// u64 keys, per key id: u32 tp_world_size, u32 length, name (0 and empty for a free id); u32 free ids,
// the ids (u32 each, the last reused first);
// version 2 only (written when the image has cache-lifecycle state, StateImage::has_lifecycle(); a
// state without the lifecycle writes version 1, which a version-1 reader reads): u8 has clock, u64
// clock (ms), u32 draining key ids, the ids (u32 each); u32 timed pages, per page: u64 at (ms),
// u32 rank index (in the order above), u32 page; u32 timed keys, per key: u64 at (ms), u32 id;
// then the request-id answers: in versions 1 and 2 u32 records, per record: u64 seq, u32 length, a
// journal payload carrying its DedupTag (key names and all); in version 3 (written when there is any
// answer to keep; it always has version 2's lifecycle section) their compact form, as the dedup cache
// keeps them: u32 entries, per entry: u64 seq, u8 route (its wire number, RouteInfo::wire), u32
// length, id, u64 body hash, u64 body size, u32 status, i64 at (ms, system clock; 0 unknown), u32
// pages, the pages (u32 each);
// in version 4 (written when a rank has TTL reclaim marks, StateImage::has_reclaim_marks(); else as
// above) version 3's layout, and after the timed keys, per rank (in the order above): u32 marks, the
// marked pages (u32 each, ascending);
// then the file name of the journal that follows (u32 length, name); then u32 crc32c of everything
// after the file header. (With no answer to keep the section is one u32 0 in every version, so such
// a snapshot is written as version 1 or 2, which older servers read.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/outcome/result.hpp>

#include "durable/record.hpp"
#include "hf3fs_meta/state.hpp"

namespace hf3fs_meta::durable {

// What went wrong, naming the file (and the offset, where there is one).
struct DirError {
  DirError(std::string text) : message(std::move(text)) {}  // NOLINT: implicit, so `return "..." + path;` reads well
  std::string message;
};
template <class T>
using DirResult = boost::outcome_v2::result<T, DirError, boost::outcome_v2::policy::terminate>;

// Snapshots with the cache lifecycle's state (the layout above); the journal stays at kFormatVersion.
inline constexpr std::uint32_t kSnapshotLifecycleVersion = 2;
// Snapshots whose request-id answers are in the compact form (the layout above).
inline constexpr std::uint32_t kSnapshotDedupVersion = 3;
// Snapshots that hold the TTL's reclaim marks (RankImage::reclaimed).
inline constexpr std::uint32_t kSnapshotReclaimVersion = 4;
inline constexpr std::uint32_t kSnapshotNewestVersion = kSnapshotReclaimVersion;

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
DirResult<Recovered> recover(const std::filesystem::path& dir, MetadataState& state);

// The two readers recover() uses, on the bytes of one file (the fuzz targets call them directly).
// Replays one journal file into `state`, its first record following out.seq, and advances `out`. In
// the `last` file a torn record at the end is left out (reported in out.cut); anything else wrong
// is an error naming the file and the offset.
DirResult<void> replay_journal(const std::filesystem::path& path, std::string_view bytes, bool last,
                               MetadataState& state, Recovered& out);
struct LoadedSnapshot {
  StateImage image;
  std::vector<DedupEntry> dedup;
  std::string next_journal;
};
// Checks a snapshot's file header and checksum, then parses it; an error names the file.
DirResult<LoadedSnapshot> read_snapshot(const std::filesystem::path& path, std::string_view bytes);

// Writes snapshot-<image.seq>.snap durably (temporary file, fsync, rename, directory fsync), naming
// the journal file that holds the records after it.
DirResult<std::uint64_t> write_snapshot(const std::filesystem::path& dir, const StateImage& image,
                                        const std::vector<DedupEntry>& dedup,
                                        const std::string& next_journal);  // returns the bytes written

// Removes the snapshots older than `seq` and the journal files whose records all come before it.
void remove_before(const std::filesystem::path& dir, std::uint64_t seq);

// Removes what an interrupted snapshot left (snapshot-*.snap.tmp); returns the files removed.
std::vector<std::filesystem::path> remove_temporaries(const std::filesystem::path& dir);

// fsync of a directory (after creating, renaming or removing a file in it).
std::optional<std::string> sync_dir(const std::filesystem::path& dir);

// flock() on the directory itself (deleting a file cannot break it); DIR/LOCK holds our PID, for the
// message a second server gets. Held until destroyed.
class DirLock {
 public:
  static DirResult<DirLock> acquire(const std::filesystem::path& dir);
  DirLock(DirLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  DirLock& operator=(DirLock&&) = delete;
  ~DirLock();

 private:
  explicit DirLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace hf3fs_meta::durable
