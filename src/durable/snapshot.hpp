// The snapshot format: a full StateImage at one change and the request-id answers kept then, in one
// file written whole (temporary file, fsync, rename) and checked whole (one checksum).
//
// snapshot-<seq, 20 digits>.snap: file header "HF3FSSNP" (log_format.hpp), then u64 seq, u32 ranks, per rank: u64 rank, u32 num_pages,
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
// in version 5 (written when named namespaces exist or existed, StateImage::namespaces or
// next_namespace_id above 1, or an answer is of one) version 4's layout for the default
// namespace, and after its reclaim marks: u32 next namespace id, u32 namespaces, per namespace (by
// id): u32 id, u32 length, name, its ranks (as above, from u32 ranks), keys and free ids, its
// draining key ids, timed pages (rank indexes into its own ranks), timed keys and reclaim marks (the
// clock is the state's, written once above); and in each answer u32 length and the namespace's name
// (empty: the default) after the body size;
// then the file name of the journal that follows (u32 length, name); then u32 crc32c of everything
// after the file header. (With no answer to keep the section is one u32 0 in every version, so such
// a snapshot is written as version 1 or 2, which older servers read.)
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "durable/error.hpp"
#include "durable/log_format.hpp"
#include "durable/record.hpp"
#include "hf3fs_meta/state.hpp"

namespace hf3fs_meta::durable {

// Snapshots with the cache lifecycle's state (the layout above); the journal stays at kFormatVersion.
inline constexpr std::uint32_t kSnapshotLifecycleVersion = 2;
// Snapshots whose request-id answers are in the compact form (the layout above).
inline constexpr std::uint32_t kSnapshotDedupVersion = 3;
// Snapshots that hold the TTL's reclaim marks (RankImage::reclaimed).
inline constexpr std::uint32_t kSnapshotReclaimVersion = 4;
// Snapshots that hold named namespaces (StateImage::namespaces) and the answers' namespaces.
inline constexpr std::uint32_t kSnapshotNamespaceVersion = 5;
inline constexpr std::uint32_t kSnapshotNewestVersion = kSnapshotNamespaceVersion;

struct LoadedSnapshot {
  StateImage image;
  std::vector<DedupEntry> dedup;
  std::string next_journal;
};
// Checks a snapshot's file header and checksum, then parses it; an error names the file (and the
// offset of what is wrong inside it).
Result<LoadedSnapshot> read_snapshot(const std::filesystem::path& path, std::string_view bytes);

// Writes snapshot-<image.seq>.snap durably (temporary file, fsync, rename, directory fsync), naming
// the journal file that holds the records after it. Returns the bytes written.
Result<std::uint64_t> write_snapshot(const std::filesystem::path& dir, const StateImage& image,
                                     const std::vector<DedupEntry>& dedup, const std::string& next_journal);

}  // namespace hf3fs_meta::durable
