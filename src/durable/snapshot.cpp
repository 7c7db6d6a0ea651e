#include "durable/snapshot.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "durable/crc32c.hpp"
#include "durable/data_dir.hpp"
#include "durable/log_reader.hpp"
#include "durable/log_writer.hpp"
#include "hf3fs_meta/routes.hpp"  // valid_namespace_name
#include "internal/populate.hpp"

namespace hf3fs_meta::durable {
namespace fs = std::filesystem;
namespace {

// The u32 array a snapshot holds at `raw`, copied without first zeroing the vector when it is aligned
// (it is: the mapping is page-aligned and every field before it a multiple of 4 bytes), into memory
// faulted in at once (internal/populate.hpp: a rank's page table is megabytes).
void assign_u32s(std::string_view raw, std::vector<std::uint32_t>& out) {
  const std::size_t n = raw.size() / 4;
  out.reserve(n);
  internal::populate(out.data(), n * 4);
  if (reinterpret_cast<std::uintptr_t>(raw.data()) % alignof(std::uint32_t) == 0) {
    const auto* words = reinterpret_cast<const std::uint32_t*>(raw.data());
    out.assign(words, words + n);
  } else {
    out.resize(n);
    if (n != 0) std::memcpy(out.data(), raw.data(), n * 4);
  }
}

// Parses a snapshot's body (checksum already checked), section by section; an error names the file
// and the offset where it found what is wrong.
class SnapshotParser {
 public:
  SnapshotParser(const fs::path& path, std::string_view body, std::uint32_t version)
      : path_(path), in_(body), version_(version) {}

  Result<LoadedSnapshot> parse() {
    LoadedSnapshot out;
    if (!in_.u64(out.image.seq)) return fail("truncated");
    if (auto r = space(out.image); !r) return std::move(r).error();
    if (version_ >= kSnapshotLifecycleVersion) {
      if (auto r = clock(out.image); !r) return std::move(r).error();
      if (auto r = lifecycle(out.image); !r) return std::move(r).error();
    }
    if (version_ >= kSnapshotNamespaceVersion) {
      if (auto r = namespaces(out.image); !r) return std::move(r).error();
    }
    if (auto r = answers(out.dedup); !r) return std::move(r).error();
    std::string_view next;
    if (!in_.bytes(next)) return fail("truncated journal name");
    out.next_journal = next;
    if (in_.left() != 4) return fail("unexpected bytes before the checksum");
    return out;
  }

 private:
  Error fail(const std::string& why, Errc code = Errc::corrupt) const {
    return Error{code, "snapshot " + path_.string() + " at offset " + std::to_string(kFileHeaderSize + in_.offset()) +
                           ": " + where_ + why};
  }

  // A namespace's ranks, keys and free ids (the default one's, or a named one's).
  Result<void> space(SpaceImage& image) {
    if (auto r = ranks(image); !r) return r;
    return keys(image);
  }

  Result<void> ranks(SpaceImage& image) {
    std::uint32_t rank_count = 0;
    if (!in_.u32(rank_count)) return fail("truncated");
    for (std::uint32_t i = 0; i < rank_count; ++i) {
      RankImage& r = image.ranks.emplace_back();
      std::uint64_t rank = 0;
      std::uint32_t num_pages = 0;
      std::uint32_t free_count = 0;
      if (!in_.u64(rank) || !in_.u32(num_pages) || !in_.u64(r.kept_on_release) || !in_.u32(free_count)) {
        return fail("truncated rank");
      }
      r.rank = static_cast<Rank>(rank);
      std::string_view pool;
      std::string_view owner;
      if (!in_.raw(std::size_t{free_count} * 4, pool) || !in_.raw(std::size_t{num_pages} * 4, owner)) {
        return fail("truncated pages of rank " + std::to_string(r.rank));
      }
      assign_u32s(pool, r.free_pool);
      assign_u32s(owner, r.owner);
      std::uint32_t allocated = 0;
      std::string_view hashes;
      if (!in_.u32(allocated) || !in_.raw(std::size_t{allocated} * 4, hashes)) {
        return fail("truncated allocated pages of rank " + std::to_string(r.rank));
      }
      assign_u32s(hashes, r.allocated_for);
    }
    return boost::outcome_v2::success();
  }

  Result<void> keys(SpaceImage& image) {
    std::uint64_t key_count = 0;
    if (!in_.u64(key_count) || key_count > in_.left() / 8) return fail("truncated key count");
    image.keys.reserve(key_count);
    internal::populate(image.keys.data(), key_count * sizeof(KeyImage));
    image.keys.resize(key_count);
    for (KeyImage& k : image.keys) {
      std::string_view name;
      if (!in_.u32(k.tp_world_size) || !in_.bytes(name)) return fail("truncated key");
      k.name = name;
    }
    std::uint32_t free_ids = 0;
    std::string_view ids;
    if (!in_.u32(free_ids) || !in_.raw(std::size_t{free_ids} * 4, ids)) return fail("truncated free key ids");
    assign_u32s(ids, image.free_ids);
    return boost::outcome_v2::success();
  }

  Result<void> clock(StateImage& image) {
    std::uint8_t has_clock = 0;
    std::uint64_t ms = 0;
    if (!in_.u8(has_clock) || !in_.u64(ms)) return fail("truncated clock");
    if (has_clock > 1) return fail("clock flag " + std::to_string(has_clock));
    if (has_clock) image.clock_ms = static_cast<std::int64_t>(ms);
    return boost::outcome_v2::success();
  }

  // A namespace's draining ids, timed pages and keys, and (version 4 on) its ranks' reclaim marks.
  Result<void> lifecycle(SpaceImage& image) {
    std::uint32_t n = 0;
    if (!in_.u32(n) || n > in_.left() / 4) return fail("truncated draining key ids");
    image.draining_ids.resize(n);
    for (std::uint32_t& id : image.draining_ids) in_.u32(id);
    if (!in_.u32(n) || n > in_.left() / 16) return fail("truncated timed pages");
    image.timed_pages.resize(n);
    for (TimedPageImage& t : image.timed_pages) {
      std::uint64_t at = 0;
      in_.u64(at);
      in_.u32(t.rank_index);
      in_.u32(t.page);
      t.at = static_cast<std::int64_t>(at);
    }
    if (!in_.u32(n) || n > in_.left() / 12) return fail("truncated timed keys");
    image.timed_keys.resize(n);
    for (TimedKeyImage& t : image.timed_keys) {
      std::uint64_t at = 0;
      in_.u64(at);
      in_.u32(t.id);
      t.at = static_cast<std::int64_t>(at);
    }
    if (version_ < kSnapshotReclaimVersion) return boost::outcome_v2::success();
    for (RankImage& r : image.ranks) {
      std::string_view marks;
      if (!in_.u32(n) || !in_.raw(std::size_t{n} * 4, marks)) {
        return fail("truncated reclaim marks of rank " + std::to_string(r.rank));
      }
      assign_u32s(marks, r.reclaimed);
    }
    return boost::outcome_v2::success();
  }

  // Version 5: the named namespaces, each a space and its lifecycle; an error names the namespace.
  Result<void> namespaces(StateImage& image) {
    std::uint32_t n = 0;
    if (!in_.u32(image.next_namespace_id) || !in_.u32(n)) return fail("truncated namespaces");
    // One at a time: a damaged count is found out by the bytes, not by reserving for it.
    for (std::uint32_t i = 0; i < n; ++i) {
      NamespaceImage& ns = image.namespaces.emplace_back();
      std::string_view name;
      if (!in_.u32(ns.id) || !in_.bytes(name)) return fail("truncated namespace");
      ns.name = name;
      where_ = "namespace " + ns.name + " (id " + std::to_string(ns.id) + "): ";
      if (auto r = space(ns.space); !r) return r;
      if (auto r = lifecycle(ns.space); !r) return r;
    }
    where_.clear();
    return boost::outcome_v2::success();
  }

  Result<void> answers(std::vector<DedupEntry>& dedup) {
    std::uint32_t dedup_count = 0;
    if (!in_.u32(dedup_count)) return fail("truncated dedup count");
    for (std::uint32_t i = 0; i < dedup_count; ++i) {
      auto entry = version_ >= kSnapshotDedupVersion ? compact_answer() : tagged_record();
      if (!entry) return std::move(entry).error();
      dedup.push_back(std::move(entry).value());
    }
    return boost::outcome_v2::success();
  }

  // One request-id answer of version 3 on.
  Result<DedupEntry> compact_answer() {
    DedupEntry e;
    std::string_view id;
    std::string_view ns;
    std::uint8_t route = 0;
    std::uint64_t at = 0;
    std::uint32_t pages = 0;
    if (!in_.u64(e.seq) || !in_.u8(route) || !in_.bytes(id) || !in_.u64(e.tag.body_hash) ||
        !in_.u64(e.tag.body_size) || (version_ >= kSnapshotNamespaceVersion && !in_.bytes(ns)) ||
        !in_.u32(e.status) || !in_.u64(at) || !in_.u32(pages)) {
      return fail("truncated request-id entry");
    }
    if (!ns.empty() && (ns == kDefaultNamespace || !valid_namespace_name(ns))) {
      return fail("request-id entry " + std::to_string(e.seq) + " names no namespace a server writes");
    }
    e.tag.ns = ns;
    const auto named = route_of_wire(route);
    if (!named) {
      return fail("unknown route " + std::to_string(route) + " of request-id entry " + std::to_string(e.seq),
                  Errc::unsupported);
    }
    e.tag.route = *named;
    e.tag.id = id;
    e.at_ms = static_cast<std::int64_t>(at);
    std::string_view raw;
    if (!in_.raw(std::size_t{pages} * 4, raw)) {
      return fail("truncated pages of request-id entry " + std::to_string(e.seq));
    }
    assign_u32s(raw, e.pages);
    return e;
  }

  // Versions 1 and 2 kept the whole tagged record: its compact form is made from it.
  Result<DedupEntry> tagged_record() {
    std::uint64_t seq = 0;
    std::string_view payload;
    if (!in_.u64(seq) || !in_.bytes(payload)) return fail("truncated dedup record");
    auto record = Record::decode(seq, payload);
    if (!record) return fail(record.error().message, record.error().code);
    if (!record.value().tag()) return fail("request-id entry " + std::to_string(seq) + " without its request id");
    return dedup_entry(seq, *record.value().tag(), record.value().change());
  }

  const fs::path& path_;
  Reader in_;
  std::uint32_t version_;
  std::string where_;  // the namespace being read, in errors
};

void write_dedup_entry(const DedupEntry& e, bool with_ns, std::string& out) {
  put_u64(out, e.seq);
  put_u8(out, wire_number(e.tag.route));
  put_bytes(out, e.tag.id);
  put_u64(out, e.tag.body_hash);
  put_u64(out, e.tag.body_size);
  if (with_ns) put_bytes(out, e.tag.ns);
  put_u32(out, e.status);
  put_u64(out, static_cast<std::uint64_t>(e.at_ms));
  put_u32(out, static_cast<std::uint32_t>(e.pages.size()));
  out.append(reinterpret_cast<const char*>(e.pages.data()), e.pages.size() * 4);
}

}  // namespace

Result<LoadedSnapshot> read_snapshot(const fs::path& path, std::string_view all) {
  auto version = check_file_header(all, kSnapshotMagic, kSnapshotNewestVersion);
  if (!version) return Error{version.error().code, "snapshot " + path.string() + ": " + version.error().message};
  if (all.size() < kFileHeaderSize + 4) {
    return Error{Errc::corrupt, "snapshot " + path.string() + ": truncated (" + std::to_string(all.size()) + " bytes)"};
  }
  const std::string_view body = all.substr(kFileHeaderSize, all.size() - kFileHeaderSize - 4);
  std::uint32_t stored = 0;
  std::memcpy(&stored, all.data() + all.size() - 4, 4);
  if (crc32c(body) != stored) {
    return Error{Errc::corrupt, "snapshot " + path.string() + ": checksum mismatch over " + std::to_string(all.size()) +
                                    " bytes (truncated or corrupt)"};
  }
  return SnapshotParser(path, all.substr(kFileHeaderSize), version.value()).parse();
}

namespace {

// Buffered writes with a running checksum; the first error sticks.
class FileWriter {
 public:
  FileWriter(int fd, std::string path) : fd_(fd), path_(std::move(path)) { buffer_.reserve(kBuffer); }
  void add(std::string_view bytes, bool checksum = true) {
    if (checksum) crc_.process_bytes(bytes.data(), bytes.size());
    if (buffer_.size() + bytes.size() > kBuffer) flush();
    if (bytes.size() >= kBuffer) {
      write_all(bytes);
    } else {
      buffer_.append(bytes);
    }
  }
  // A u32 array, after the small fields gathered in `small`.
  void add_u32s(std::string& small, const std::vector<std::uint32_t>& words) {
    add(small);
    small.clear();
    add({reinterpret_cast<const char*>(words.data()), words.size() * 4});
  }
  void flush() {
    write_all(buffer_);
    buffer_.clear();
  }
  std::uint32_t checksum() const { return crc_.checksum(); }
  const std::optional<Error>& error() const { return error_; }
  std::uint64_t written() const { return written_; }

 private:
  static constexpr std::size_t kBuffer = std::size_t{1} << 20;
  static constexpr std::uint64_t kWritebackEvery = std::uint64_t{8} << 20;
  void write_all(std::string_view bytes) {
    if (error_) return;
    int err = take_injected_error(DiskOp::snapshot_write);
    if (err == 0) err = durable::write_all(fd_, bytes);
    if (err != 0) {
      error_ = Error{Errc::io, "write " + path_ + ": " + errno_text(err)};
      return;
    }
    written_ += bytes.size();
    // Every few megabytes: wait for the writeback started last time, start it for what followed.
    // Without it the whole file reaches the disk in the final fsync, a burst that stalls the
    // journal's writes meanwhile (Redis syncs its snapshots incrementally for the same reason). A
    // failure here shows again in that fsync.
    if (!error_ && written_ - writeback_at_ >= kWritebackEvery) {
      (void)::sync_file_range(fd_, 0, static_cast<off_t>(written_),
                              SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE);
      writeback_at_ = written_;
    }
  }
  int fd_;
  std::string path_;
  std::string buffer_;
  Crc32c crc_;
  std::optional<Error> error_;
  std::uint64_t written_ = 0;
  std::uint64_t writeback_at_ = 0;
};

// Named namespaces exist, or existed (the next one's id must survive, apply checks it), or an answer
// is of one.
bool has_namespaces(const StateImage& image, const std::vector<DedupEntry>& dedup) {
  if (!image.namespaces.empty() || image.next_namespace_id != 1) return true;
  return std::any_of(dedup.begin(), dedup.end(), [](const DedupEntry& e) { return !e.tag.ns.empty(); });
}

// The oldest version that holds what there is, so that older servers read what they can.
std::uint32_t version_for(const StateImage& image, const std::vector<DedupEntry>& dedup) {
  if (has_namespaces(image, dedup)) return kSnapshotNamespaceVersion;
  if (image.has_reclaim_marks()) return kSnapshotReclaimVersion;
  if (!dedup.empty()) return kSnapshotDedupVersion;
  return image.has_lifecycle() ? kSnapshotLifecycleVersion : kFormatVersion;
}

// A namespace's ranks, keys and free ids. Small fields gather in `small` until an array or 64 kB goes out.
void write_space(FileWriter& out, std::string& small, const SpaceImage& image) {
  put_u32(small, static_cast<std::uint32_t>(image.ranks.size()));
  for (const RankImage& r : image.ranks) {
    put_u64(small, static_cast<std::uint64_t>(r.rank));
    put_u32(small, static_cast<std::uint32_t>(r.owner.size()));
    put_u64(small, r.kept_on_release);
    put_u32(small, static_cast<std::uint32_t>(r.free_pool.size()));
    out.add_u32s(small, r.free_pool);
    out.add_u32s(small, r.owner);
    put_u32(small, static_cast<std::uint32_t>(r.allocated_for.size()));
    out.add_u32s(small, r.allocated_for);
  }
  put_u64(small, image.keys.size());
  for (const KeyImage& k : image.keys) {
    put_u32(small, k.tp_world_size);
    put_bytes(small, k.name);
    if (small.size() > 65536) out.add_u32s(small, {});
  }
  put_u32(small, static_cast<std::uint32_t>(image.free_ids.size()));
  out.add_u32s(small, image.free_ids);
}

void write_clock(std::string& small, const StateImage& image) {
  put_u8(small, image.clock_ms ? 1 : 0);
  put_u64(small, static_cast<std::uint64_t>(image.clock_ms.value_or(0)));
}

// A namespace's lifecycle section, with its ranks' reclaim marks from version 4 on.
void write_lifecycle(FileWriter& out, std::string& small, const SpaceImage& image, bool marks) {
  put_u32(small, static_cast<std::uint32_t>(image.draining_ids.size()));
  for (const std::uint32_t id : image.draining_ids) put_u32(small, id);
  put_u32(small, static_cast<std::uint32_t>(image.timed_pages.size()));
  for (const TimedPageImage& t : image.timed_pages) {
    put_u64(small, static_cast<std::uint64_t>(t.at));
    put_u32(small, t.rank_index);
    put_u32(small, t.page);
    if (small.size() > 65536) out.add_u32s(small, {});
  }
  put_u32(small, static_cast<std::uint32_t>(image.timed_keys.size()));
  for (const TimedKeyImage& t : image.timed_keys) {
    put_u64(small, static_cast<std::uint64_t>(t.at));
    put_u32(small, t.id);
    if (small.size() > 65536) out.add_u32s(small, {});
  }
  if (!marks) return;
  for (const RankImage& r : image.ranks) {
    put_u32(small, static_cast<std::uint32_t>(r.reclaimed.size()));
    out.add_u32s(small, r.reclaimed);
  }
}

void write_namespaces(FileWriter& out, std::string& small, const StateImage& image) {
  put_u32(small, image.next_namespace_id);
  put_u32(small, static_cast<std::uint32_t>(image.namespaces.size()));
  for (const NamespaceImage& ns : image.namespaces) {
    put_u32(small, ns.id);
    put_bytes(small, ns.name);
    write_space(out, small, ns.space);
    write_lifecycle(out, small, ns.space, true);
  }
}

// fsync, rename over the final name, directory fsync; the temporary file goes on any error.
Result<void> make_durable(int fd, const fs::path& tmp, const fs::path& final_path, const fs::path& dir,
                          std::optional<Error> error) {
  if (!error && ::fsync(fd) != 0) error = Error{Errc::io, "fsync " + tmp.string() + ": " + errno_text(errno)};
  ::close(fd);
  if (!error && ::rename(tmp.c_str(), final_path.c_str()) != 0) {
    error = Error{Errc::io, "rename " + tmp.string() + ": " + errno_text(errno)};
  }
  if (!error) {
    if (auto synced = sync_dir(dir); !synced) error = std::move(synced).error();
  }
  if (!error) return boost::outcome_v2::success();
  ::unlink(tmp.c_str());
  return std::move(*error);
}

}  // namespace

Result<std::uint64_t> write_snapshot(const fs::path& dir, const StateImage& image, const std::vector<DedupEntry>& dedup,
                                     const std::string& next_journal) {
  const fs::path final_path = dir / snapshot_name(image.seq);
  const fs::path tmp = fs::path(final_path).concat(".tmp");
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Error{Errc::io, tmp.string() + ": " + errno_text(errno)};
  FileWriter out(fd, tmp.string());
  const std::uint32_t version = version_for(image, dedup);
  out.add(file_header(kSnapshotMagic, version), false);
  std::string small;
  put_u64(small, image.seq);
  write_space(out, small, image);
  if (version >= kSnapshotLifecycleVersion) {
    write_clock(small, image);
    write_lifecycle(out, small, image, version >= kSnapshotReclaimVersion);
  }
  if (version >= kSnapshotNamespaceVersion) write_namespaces(out, small, image);
  put_u32(small, static_cast<std::uint32_t>(dedup.size()));
  for (const DedupEntry& e : dedup) {
    write_dedup_entry(e, version >= kSnapshotNamespaceVersion, small);
    if (small.size() > 65536) out.add_u32s(small, {});
  }
  put_bytes(small, next_journal);
  out.add_u32s(small, {});
  std::string trailer;
  put_u32(trailer, out.checksum());
  out.add(trailer, false);
  out.flush();
  if (auto done = make_durable(fd, tmp, final_path, dir, out.error()); !done) return std::move(done).error();
  return out.written();
}

}  // namespace hf3fs_meta::durable
