#include "durable/data_dir.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <system_error>
#include <utility>

namespace hf3fs_meta::durable {
namespace fs = std::filesystem;
std::string errno_text(int err) { return std::generic_category().message(err); }

int write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return 0;
}

namespace {

struct InjectedError {
  std::atomic<std::int64_t> times{0};
  std::atomic<int> err{0};
};
InjectedError g_injected[3];

}  // namespace

void inject_disk_error(DiskOp op, int err, std::int64_t times) {
  auto& slot = g_injected[static_cast<int>(op)];
  slot.err.store(err, std::memory_order_relaxed);
  slot.times.store(times, std::memory_order_release);
}

void clear_disk_errors() noexcept {
  for (auto& slot : g_injected) slot.times.store(0, std::memory_order_release);
}

int take_injected_error(DiskOp op) noexcept {
  auto& slot = g_injected[static_cast<int>(op)];
  std::int64_t left = slot.times.load(std::memory_order_relaxed);
  while (left > 0) {
    if (slot.times.compare_exchange_weak(left, left - 1, std::memory_order_acq_rel)) {
      return slot.err.load(std::memory_order_relaxed);
    }
  }
  return 0;
}

namespace {

std::string numbered(const char* prefix, std::uint64_t n, const char* suffix) {
  char name[64];
  std::snprintf(name, sizeof name, "%s%020llu%s", prefix, static_cast<unsigned long long>(n), suffix);
  return name;
}

// The number in a file name made by numbered(), if the name is one.
std::optional<std::uint64_t> number_of(const std::string& name, std::string_view prefix, std::string_view suffix) {
  if (name.size() != prefix.size() + 20 + suffix.size() || !name.starts_with(prefix) || !name.ends_with(suffix)) {
    return std::nullopt;
  }
  std::uint64_t n = 0;
  for (std::size_t i = prefix.size(); i < prefix.size() + 20; ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    n = n * 10 + static_cast<std::uint64_t>(name[i] - '0');
  }
  return n;
}

// A file's bytes, mapped read-only: recovery reads hundreds of megabytes, which a read() would copy
// into freshly zeroed memory first. Only the server holding the data dir's LOCK changes its files
// (a --verify-data-dir beside a running server may see a journal the server is appending to).
class FileBytes {
 public:
  FileBytes(void* data, std::size_t size) : data_(data), size_(size) {}
  FileBytes(FileBytes&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  FileBytes& operator=(FileBytes&&) = delete;
  ~FileBytes() {
    if (data_ != nullptr) ::munmap(data_, size_);
  }
  std::string_view bytes() const noexcept { return {static_cast<const char*>(data_), size_}; }

 private:
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

DirResult<FileBytes> read_file(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return DirError(path.string() + ": " + errno_text(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return DirError(path.string() + ": " + errno_text(err));
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  void* data = size == 0 ? nullptr : ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (data == MAP_FAILED) return DirError(path.string() + ": " + errno_text(err));
  return FileBytes(data, size);
}

// The u32 array a snapshot holds at `raw`, copied without first zeroing the vector when it is aligned
// (it is: the mapping is page-aligned and every field before it a multiple of 4 bytes).
void assign_u32s(std::string_view raw, std::vector<std::uint32_t>& out) {
  const std::size_t n = raw.size() / 4;
  if (reinterpret_cast<std::uintptr_t>(raw.data()) % alignof(std::uint32_t) == 0) {
    const auto* words = reinterpret_cast<const std::uint32_t*>(raw.data());
    out.assign(words, words + n);
  } else {
    out.resize(n);
    if (n != 0) std::memcpy(out.data(), raw.data(), n * 4);
  }
}

struct DirListing {
  std::map<std::uint64_t, fs::path> snapshots;  // by seq
  std::map<std::uint64_t, fs::path> journals;   // by first seq
};

DirResult<DirListing> list(const fs::path& dir) {
  DirListing listing;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (auto n = number_of(name, "snapshot-", ".snap")) listing.snapshots.emplace(*n, entry.path());
    if (auto n = number_of(name, "journal-", ".log")) listing.journals.emplace(*n, entry.path());
  }
  if (ec) return dir.string() + ": " + ec.message();
  return listing;
}

// One request-id answer of a version-3 snapshot (data_dir.hpp); an error says what is wrong.
std::optional<std::string> read_dedup_entry(Reader& in, DedupEntry& e) {
  std::string_view id;
  std::uint8_t route = 0;
  std::uint64_t at = 0;
  std::uint32_t pages = 0;
  if (!in.u64(e.seq) || !in.u8(route) || !in.bytes(id) || !in.u64(e.tag.body_hash) ||
      !in.u64(e.tag.body_size) || !in.u32(e.status) || !in.u64(at) || !in.u32(pages)) {
    return "truncated request-id entry";
  }
  const auto named = route_of_wire(route);
  if (!named) return "unknown route " + std::to_string(route) + " of request-id entry " + std::to_string(e.seq);
  e.tag.route = *named;
  e.tag.id = id;
  e.at_ms = static_cast<std::int64_t>(at);
  std::string_view raw;
  if (!in.raw(std::size_t{pages} * 4, raw)) return "truncated pages of request-id entry " + std::to_string(e.seq);
  assign_u32s(raw, e.pages);
  return std::nullopt;
}

void write_dedup_entry(const DedupEntry& e, std::string& out) {
  put_u64(out, e.seq);
  put_u8(out, wire_number(e.tag.route));
  put_bytes(out, e.tag.id);
  put_u64(out, e.tag.body_hash);
  put_u64(out, e.tag.body_size);
  put_u32(out, e.status);
  put_u64(out, static_cast<std::uint64_t>(e.at_ms));
  put_u32(out, static_cast<std::uint32_t>(e.pages.size()));
  out.append(reinterpret_cast<const char*>(e.pages.data()), e.pages.size() * 4);
}

// Parses a snapshot's bytes (checksum already checked) into an image and its dedup records.
DirResult<LoadedSnapshot> parse_snapshot(const fs::path& path, std::string_view bytes, std::uint32_t version) {
  LoadedSnapshot out;
  Reader in(bytes);
  auto fail = [&](const std::string& why) -> DirResult<LoadedSnapshot> {
    return "snapshot " + path.string() + " at offset " + std::to_string(kFileHeaderSize + in.offset()) + ": " + why;
  };
  std::uint32_t rank_count = 0;
  if (!in.u64(out.image.seq) || !in.u32(rank_count)) return fail("truncated");
  for (std::uint32_t i = 0; i < rank_count; ++i) {
    RankImage& r = out.image.ranks.emplace_back();
    std::uint64_t rank = 0;
    std::uint32_t num_pages = 0;
    std::uint32_t free_count = 0;
    if (!in.u64(rank) || !in.u32(num_pages) || !in.u64(r.kept_on_release) || !in.u32(free_count)) {
      return fail("truncated rank");
    }
    r.rank = static_cast<Rank>(rank);
    std::string_view pool;
    std::string_view owner;
    if (!in.raw(std::size_t{free_count} * 4, pool) || !in.raw(std::size_t{num_pages} * 4, owner)) {
      return fail("truncated pages of rank " + std::to_string(r.rank));
    }
    assign_u32s(pool, r.free_pool);
    assign_u32s(owner, r.owner);
    std::uint32_t allocated = 0;
    std::string_view hashes;
    if (!in.u32(allocated) || !in.raw(std::size_t{allocated} * 4, hashes)) {
      return fail("truncated allocated pages of rank " + std::to_string(r.rank));
    }
    assign_u32s(hashes, r.allocated_for);
  }
  std::uint64_t key_count = 0;
  if (!in.u64(key_count) || key_count > in.left() / 8) return fail("truncated key count");
  out.image.keys.resize(key_count);
  for (KeyImage& k : out.image.keys) {
    std::string_view name;
    if (!in.u32(k.tp_world_size) || !in.bytes(name)) return fail("truncated key");
    k.name = name;
  }
  std::uint32_t free_ids = 0;
  std::string_view ids;
  if (!in.u32(free_ids) || !in.raw(std::size_t{free_ids} * 4, ids)) return fail("truncated free key ids");
  assign_u32s(ids, out.image.free_ids);
  if (version >= kSnapshotLifecycleVersion) {
    StateImage& image = out.image;
    std::uint8_t has_clock = 0;
    std::uint64_t clock = 0;
    std::uint32_t n = 0;
    if (!in.u8(has_clock) || !in.u64(clock)) return fail("truncated clock");
    if (has_clock > 1) return fail("clock flag " + std::to_string(has_clock));
    if (has_clock) image.clock_ms = static_cast<std::int64_t>(clock);
    if (!in.u32(n) || n > in.left() / 4) return fail("truncated draining key ids");
    image.draining_ids.resize(n);
    for (std::uint32_t& id : image.draining_ids) in.u32(id);
    if (!in.u32(n) || n > in.left() / 16) return fail("truncated timed pages");
    image.timed_pages.resize(n);
    for (TimedPageImage& t : image.timed_pages) {
      std::uint64_t at = 0;
      in.u64(at);
      in.u32(t.rank_index);
      in.u32(t.page);
      t.at = static_cast<std::int64_t>(at);
    }
    if (!in.u32(n) || n > in.left() / 12) return fail("truncated timed keys");
    image.timed_keys.resize(n);
    for (TimedKeyImage& t : image.timed_keys) {
      std::uint64_t at = 0;
      in.u64(at);
      in.u32(t.id);
      t.at = static_cast<std::int64_t>(at);
    }
    if (version >= kSnapshotReclaimVersion) {
      for (RankImage& r : image.ranks) {
        std::string_view marks;
        if (!in.u32(n) || !in.raw(std::size_t{n} * 4, marks)) {
          return fail("truncated reclaim marks of rank " + std::to_string(r.rank));
        }
        assign_u32s(marks, r.reclaimed);
      }
    }
  }
  std::uint32_t dedup_count = 0;
  if (!in.u32(dedup_count)) return fail("truncated dedup count");
  for (std::uint32_t i = 0; i < dedup_count; ++i) {
    if (version >= kSnapshotDedupVersion) {
      if (auto error = read_dedup_entry(in, out.dedup.emplace_back())) return fail(*error);
      continue;
    }
    // Versions 1 and 2 kept the whole tagged record: its compact form is made from it.
    std::uint64_t seq = 0;
    std::string_view payload;
    if (!in.u64(seq) || !in.bytes(payload)) return fail("truncated dedup record");
    std::string error;
    auto record = Record::decode(seq, payload, error);
    if (!record) return fail(error);
    if (!record->tag()) return fail("request-id entry " + std::to_string(seq) + " without its request id");
    out.dedup.push_back(dedup_entry(seq, *record->tag(), record->change()));
  }
  std::string_view next;
  if (!in.bytes(next)) return fail("truncated journal name");
  out.next_journal = next;
  if (in.left() != 4) return fail("unexpected bytes before the checksum");
  return out;
}

}  // namespace

DirResult<LoadedSnapshot> read_snapshot(const fs::path& path, std::string_view all) {
  std::uint32_t version = 0;
  if (auto error = check_file_header(all, kSnapshotMagic, kSnapshotNewestVersion, &version)) {
    return "snapshot " + path.string() + ": " + *error;
  }
  if (all.size() < kFileHeaderSize + 4) return "snapshot " + path.string() + ": truncated (" + std::to_string(all.size()) + " bytes)";
  const std::string_view body = all.substr(kFileHeaderSize, all.size() - kFileHeaderSize - 4);
  std::uint32_t stored = 0;
  std::memcpy(&stored, all.data() + all.size() - 4, 4);
  if (crc32c(body) != stored) {
    return "snapshot " + path.string() + ": checksum mismatch over " + std::to_string(all.size()) +
           " bytes (truncated or corrupt)";
  }
  return parse_snapshot(path, all.substr(kFileHeaderSize), version);
}

std::string journal_name(std::uint64_t first_seq) { return numbered("journal-", first_seq, ".log"); }
std::string snapshot_name(std::uint64_t seq) { return numbered("snapshot-", seq, ".snap"); }

DirResult<void> replay_journal(const fs::path& path, std::string_view all, bool last, MetadataState& state,
                               Recovered& out) {
  auto where = [&](std::size_t offset) { return "journal " + path.string() + " at offset " + std::to_string(offset); };
  std::size_t at = kFileHeaderSize;
  Record record;  // decoded in place, one record after another
  if (all.size() < kFileHeaderSize && last) {
    // An empty file (a crash right after it was created) has nothing to cut: nothing to report.
    if (!all.empty()) {
      out.cut_bytes = all.size();
      out.cut = "cut " + std::to_string(all.size()) + " bytes after change " + std::to_string(out.seq) +
                ": a torn file header of " + path.string();
    }
    at = 0;
  } else if (auto error = check_file_header(all, kJournalMagic)) {
    return where(0) + ": " + *error;
  } else {
    while (at < all.size()) {
      const std::size_t left = all.size() - at;
      Reader header(all.substr(at, std::min(left, kRecordHeaderSize)));
      std::uint64_t seq = 0;
      std::uint32_t len = 0;
      std::uint32_t crc = 0;
      const bool whole_header = header.u64(seq) && header.u32(len) && header.u32(crc);
      if (whole_header && crc != crc32c(all.substr(at, 12))) return where(at) + ": record header checksum mismatch";
      if (!whole_header || left < kRecordHeaderSize + std::size_t{len} + kRecordTrailerSize) {
        if (!last) return where(at) + ": torn record in a journal that is not the last";
        out.cut_bytes = left;
        out.cut = "cut " + std::to_string(left) + " bytes after change " + std::to_string(out.seq) +
                  ": a torn record at " + where(at);
        break;
      }
      if (seq != out.seq + 1) {
        return where(at) + ": record " + std::to_string(seq) + ", expected " + std::to_string(out.seq + 1);
      }
      const std::string_view payload = all.substr(at + kRecordHeaderSize, len);
      std::uint32_t payload_crc = 0;
      std::memcpy(&payload_crc, all.data() + at + kRecordHeaderSize + len, 4);
      if (payload_crc != crc32c(payload)) return where(at) + ": record payload checksum mismatch";
      // Decoded in place, into storage reused from record to record; a tagged record (a request-id
      // answer) is kept in the compact form the dedup cache keeps.
      std::string error;
      if (!record.decode_view(seq, payload, error)) return where(at) + ": " + error;
      const Change& change = record.change();
      if (auto applied = state.apply(change); !applied) return where(at) + ": " + applied.error().message;
      if (record.tag()) out.dedup.push_back(dedup_entry(seq, *record.tag(), change));
      out.seq = seq;
      ++out.records;
      at += kRecordHeaderSize + len + kRecordTrailerSize;
    }
  }
  out.journal_bytes += at;
  out.journal = path;
  out.journal_valid_bytes = at;
  return boost::outcome_v2::success();
}

DirResult<Recovered> recover(const fs::path& dir, MetadataState& state) {
  Recovered out;
  auto listing = list(dir);
  if (!listing) return std::move(listing).error();
  auto& journals = listing.value().journals;
  std::optional<std::string> named_journal;
  if (!listing.value().snapshots.empty()) {
    const auto& [seq, path] = *listing.value().snapshots.rbegin();
    auto bytes = read_file(path);
    if (!bytes) return std::move(bytes).error();
    auto loaded = read_snapshot(path, bytes.value().bytes());
    if (!loaded) return std::move(loaded).error();
    if (loaded.value().image.seq != seq) {
      return "snapshot " + path.string() + ": holds change " + std::to_string(loaded.value().image.seq);
    }
    named_journal = loaded.value().next_journal;
    out.dedup = std::move(loaded.value().dedup);
    if (auto imported = state.import_image(std::move(loaded.value().image)); !imported) {
      return "snapshot " + path.string() + ": " + imported.error().message;
    }
    out.snapshot_seq = seq;
    if (!fs::exists(dir / *named_journal)) {
      return "snapshot " + path.string() + " names " + (dir / *named_journal).string() + ", which is missing";
    }
  }
  out.seq = out.snapshot_seq;
  // Files whose records all precede the snapshot are leftovers of a removal a crash interrupted.
  std::vector<std::pair<std::uint64_t, fs::path>> chain;
  for (const auto& [first, path] : journals) {
    if (first > out.snapshot_seq) chain.emplace_back(first, path);
  }
  for (std::size_t f = 0; f < chain.size(); ++f) {
    const auto& [first, path] = chain[f];
    const bool last = f + 1 == chain.size();
    if (first != out.seq + 1) {
      // The file before ends at a record boundary short of this one: changes were lost (a file or
      // the end of one was removed), which recovery cannot make up for.
      return "journal " + path.string() + " starts at record " + std::to_string(first) + ", expected " +
             std::to_string(out.seq + 1) + ": changes " + std::to_string(out.seq + 1) + " to " +
             std::to_string(first - 1) + " are missing (a journal file is missing or was cut)";
    }
    auto bytes = read_file(path);
    if (!bytes) return std::move(bytes).error();
    auto replayed = replay_journal(path, bytes.value().bytes(), last, state, out);
    if (!replayed) return std::move(replayed).error();
    out.journal_first_seq = first;
  }
  return out;
}

std::optional<std::string> sync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return dir.string() + ": " + errno_text(errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return "fsync " + dir.string() + ": " + errno_text(err);
  return std::nullopt;
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
  void flush() {
    write_all(buffer_);
    buffer_.clear();
  }
  std::uint32_t checksum() const { return crc_.checksum(); }
  const std::optional<std::string>& error() const { return error_; }
  std::uint64_t written() const { return written_; }

 private:
  static constexpr std::size_t kBuffer = std::size_t{1} << 20;
  static constexpr std::uint64_t kWritebackEvery = std::uint64_t{8} << 20;
  void write_all(std::string_view bytes) {
    if (error_) return;
    int err = take_injected_error(DiskOp::snapshot_write);
    if (err == 0) err = durable::write_all(fd_, bytes);
    if (err != 0) {
      error_ = "write " + path_ + ": " + errno_text(err);
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
  std::optional<std::string> error_;
  std::uint64_t written_ = 0;
  std::uint64_t writeback_at_ = 0;
};

}  // namespace

DirResult<std::uint64_t> write_snapshot(const fs::path& dir, const StateImage& image,
                                        const std::vector<DedupEntry>& dedup, const std::string& next_journal) {
  const fs::path final_path = dir / snapshot_name(image.seq);
  const fs::path tmp = fs::path(final_path).concat(".tmp");
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return tmp.string() + ": " + errno_text(errno);
  FileWriter out(fd, tmp.string());
  // The oldest version that holds what there is, so that older servers read what they can.
  const bool marks = image.has_reclaim_marks();
  const bool compact_dedup = !dedup.empty() || marks;
  const bool lifecycle = image.has_lifecycle() || compact_dedup;
  out.add(file_header(kSnapshotMagic, marks           ? kSnapshotReclaimVersion
                                      : compact_dedup ? kSnapshotDedupVersion
                                      : lifecycle     ? kSnapshotLifecycleVersion
                                                      : kFormatVersion),
          false);
  std::string small;
  auto emit_small = [&] {
    out.add(small);
    small.clear();
  };
  put_u64(small, image.seq);
  put_u32(small, static_cast<std::uint32_t>(image.ranks.size()));
  emit_small();
  for (const RankImage& r : image.ranks) {
    put_u64(small, static_cast<std::uint64_t>(r.rank));
    put_u32(small, static_cast<std::uint32_t>(r.owner.size()));
    put_u64(small, r.kept_on_release);
    put_u32(small, static_cast<std::uint32_t>(r.free_pool.size()));
    emit_small();
    out.add({reinterpret_cast<const char*>(r.free_pool.data()), r.free_pool.size() * 4});
    out.add({reinterpret_cast<const char*>(r.owner.data()), r.owner.size() * 4});
    put_u32(small, static_cast<std::uint32_t>(r.allocated_for.size()));
    emit_small();
    out.add({reinterpret_cast<const char*>(r.allocated_for.data()), r.allocated_for.size() * 4});
  }
  put_u64(small, image.keys.size());
  for (const KeyImage& k : image.keys) {
    put_u32(small, k.tp_world_size);
    put_bytes(small, k.name);
    if (small.size() > 65536) emit_small();
  }
  put_u32(small, static_cast<std::uint32_t>(image.free_ids.size()));
  emit_small();
  out.add({reinterpret_cast<const char*>(image.free_ids.data()), image.free_ids.size() * 4});
  if (lifecycle) {
    put_u8(small, image.clock_ms ? 1 : 0);
    put_u64(small, static_cast<std::uint64_t>(image.clock_ms.value_or(0)));
    put_u32(small, static_cast<std::uint32_t>(image.draining_ids.size()));
    for (const std::uint32_t id : image.draining_ids) put_u32(small, id);
    put_u32(small, static_cast<std::uint32_t>(image.timed_pages.size()));
    for (const TimedPageImage& t : image.timed_pages) {
      put_u64(small, static_cast<std::uint64_t>(t.at));
      put_u32(small, t.rank_index);
      put_u32(small, t.page);
      if (small.size() > 65536) emit_small();
    }
    put_u32(small, static_cast<std::uint32_t>(image.timed_keys.size()));
    for (const TimedKeyImage& t : image.timed_keys) {
      put_u64(small, static_cast<std::uint64_t>(t.at));
      put_u32(small, t.id);
      if (small.size() > 65536) emit_small();
    }
    if (marks) {
      for (const RankImage& r : image.ranks) {
        put_u32(small, static_cast<std::uint32_t>(r.reclaimed.size()));
        emit_small();
        out.add({reinterpret_cast<const char*>(r.reclaimed.data()), r.reclaimed.size() * 4});
      }
    }
  }
  put_u32(small, static_cast<std::uint32_t>(dedup.size()));
  for (const DedupEntry& e : dedup) {
    write_dedup_entry(e, small);
    if (small.size() > 65536) emit_small();
  }
  put_bytes(small, next_journal);
  emit_small();
  std::string trailer;
  put_u32(trailer, out.checksum());
  out.add(trailer, false);
  out.flush();
  std::optional<std::string> error = out.error();
  if (!error && ::fsync(fd) != 0) error = "fsync " + tmp.string() + ": " + errno_text(errno);
  ::close(fd);
  if (!error && ::rename(tmp.c_str(), final_path.c_str()) != 0) {
    error = "rename " + tmp.string() + ": " + errno_text(errno);
  }
  if (!error) error = sync_dir(dir);
  if (error) {
    ::unlink(tmp.c_str());
    return DirError(std::move(*error));
  }
  return out.written();
}

void remove_before(const fs::path& dir, std::uint64_t seq) {
  auto listing = list(dir);
  if (!listing) return;
  for (const auto& [n, path] : listing.value().snapshots) {
    if (n < seq) ::unlink(path.c_str());
  }
  for (const auto& [first, path] : listing.value().journals) {
    if (first <= seq) ::unlink(path.c_str());
  }
}

std::vector<fs::path> remove_temporaries(const fs::path& dir) {
  std::vector<fs::path> removed;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.ends_with(".tmp") || !number_of(name.substr(0, name.size() - 4), "snapshot-", ".snap")) continue;
    if (::unlink(entry.path().c_str()) == 0) removed.push_back(entry.path());
  }
  return removed;
}

namespace {

// The PID holding a flock on the file `fd` refers to, from /proc/locks ("1: FLOCK ADVISORY WRITE
// <pid> <major>:<minor>:<inode> 0 EOF", the device numbers in hex): what LOCK said, if it was deleted.
std::optional<std::string> flock_holder(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return std::nullopt;
  char device[64];
  std::snprintf(device, sizeof device, "%02x:%02x:%llu", ::major(st.st_dev), ::minor(st.st_dev),
                static_cast<unsigned long long>(st.st_ino));
  std::FILE* locks = std::fopen("/proc/locks", "re");
  if (locks == nullptr) return std::nullopt;
  std::optional<std::string> holder;
  char line[256];
  while (!holder && std::fgets(line, sizeof line, locks) != nullptr) {
    char kind[16] = {};
    char id[64] = {};
    long pid = 0;
    if (std::sscanf(line, "%*s %15s %*s %*s %ld %63s", kind, &pid, id) == 3 && std::strcmp(kind, "FLOCK") == 0 &&
        std::strcmp(id, device) == 0) {
      holder = std::to_string(pid);
    }
  }
  std::fclose(locks);
  return holder;
}

}  // namespace

DirResult<DirLock> DirLock::acquire(const fs::path& dir) {
  // The lock is on the directory: a file in it (LOCK included) can be deleted while a server runs.
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return dir.string() + ": " + errno_text(errno);
  const fs::path path = dir / "LOCK";
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const auto listed = err == EWOULDBLOCK ? flock_holder(fd) : std::nullopt;
    ::close(fd);
    if (err != EWOULDBLOCK) return "flock " + dir.string() + ": " + errno_text(err);
    std::string holder = listed ? *listed + " (" + path.string() + ", which names it, was deleted)"
                                : "unknown (" + path.string() + ", which names it, was deleted)";
    if (const int pid_fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC); pid_fd >= 0) {
      char pid[32] = {};
      const ssize_t n = ::read(pid_fd, pid, sizeof pid - 1);
      ::close(pid_fd);
      holder = n > 0 ? std::string(pid, static_cast<std::size_t>(n)) : "unknown (" + path.string() + " is empty)";
      while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    }
    return "data dir " + dir.string() + " is in use by process " + holder;
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  const int pid_fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const bool written = pid_fd >= 0 && ::write(pid_fd, pid.data(), pid.size()) == static_cast<ssize_t>(pid.size());
  const int err = errno;
  if (pid_fd >= 0) ::close(pid_fd);
  if (!written) {
    ::close(fd);
    return "write " + path.string() + ": " + errno_text(err);
  }
  return DirLock(fd);
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace hf3fs_meta::durable
