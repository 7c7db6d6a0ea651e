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

#include "durable/journal.hpp"
#include "durable/log_format.hpp"
#include "durable/log_reader.hpp"
#include "durable/log_writer.hpp"
#include "durable/snapshot.hpp"

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

struct DirListing {
  std::map<std::uint64_t, fs::path> snapshots;  // by seq
  std::map<std::uint64_t, fs::path> journals;   // by first seq
};

Result<DirListing> list(const fs::path& dir) {
  DirListing listing;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (auto n = number_of(name, "snapshot-", ".snap")) listing.snapshots.emplace(*n, entry.path());
    if (auto n = number_of(name, "journal-", ".log")) listing.journals.emplace(*n, entry.path());
  }
  if (ec) return Error{Errc::io, dir.string() + ": " + ec.message()};
  return listing;
}

}  // namespace

FileBytes::~FileBytes() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

Result<FileBytes> read_file(const fs::path& path, bool populate) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error{Errc::io, path.string() + ": " + errno_text(errno)};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Error{Errc::io, path.string() + ": " + errno_text(err)};
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  void* data = size == 0 ? nullptr : ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | (populate ? MAP_POPULATE : 0), fd, 0);
  const int err = errno;
  ::close(fd);
  if (data == MAP_FAILED) return Error{Errc::io, path.string() + ": " + errno_text(err)};
  return FileBytes(data, size);
}

std::string journal_name(std::uint64_t first_seq) { return numbered("journal-", first_seq, ".log"); }
std::string snapshot_name(std::uint64_t seq) { return numbered("snapshot-", seq, ".snap"); }

namespace {

// A torn tail the reader dropped becomes what recovery reports: the bytes cut, after which change.
class CutReporter final : public CorruptionReporter {
 public:
  explicit CutReporter(Recovered& out) : out_(out) {}
  void dropped(std::size_t bytes, std::string_view why) override {
    out_.cut_bytes = bytes;
    out_.cut = "cut " + std::to_string(bytes) + " bytes after change " + std::to_string(out_.seq) + ": " +
               std::string(why);
  }

 private:
  Recovered& out_;
};

}  // namespace

Result<void> replay_journal(const fs::path& path, std::string_view all, bool last, MetadataState& state,
                            Recovered& out, std::uint64_t first_seq, bool to_sink) {
  CutReporter cut(out);
  LogReader reader(path, all, last, first_seq == 0 ? out.seq + 1 : first_seq, cut);
  Record record;  // decoded in place, into storage reused from record to record
  for (;;) {
    auto next = reader.read();
    if (!next) return std::move(next).error();
    if (!next.value()) break;
    const LogRecord& r = *next.value();
    if (r.seq <= out.seq) continue;  // the state has it
    if (auto decoded = record.decode_view(r.seq, r.payload); !decoded) {
      return Error{decoded.error().code, reader.where(r.offset) + ": " + decoded.error().message};
    }
    const Change& change = record.change();
    // The sink's journal keeps the tag's answer with its namespace's name, which the bytes lack.
    std::optional<DedupTag> named;
    if (to_sink && record.tag()) {
      named = *record.tag();
      named->ns = change.kind == ChangeKind::namespace_created
                      ? std::string(change.ns_name)
                      : change.ns == 0 ? std::string() : state.namespace_name(change.ns).value_or(std::string());
    }
    const TagScope tagged(named ? &*named : nullptr);
    if (auto applied = state.apply(change, to_sink); !applied) {
      return Error{Errc::inconsistent, reader.where(r.offset) + ": " + applied.error().message};
    }
    // A tagged record (a request-id answer) is kept in the compact form the dedup cache keeps, with
    // the name of its namespace at this point of the history (the tag's bytes do not hold it).
    if (record.tag()) {
      DedupEntry& entry = out.dedup.emplace_back(dedup_entry(r.seq, *record.tag(), change));
      if (change.ns != 0) entry.tag.ns = state.namespace_name(change.ns).value_or(std::string());
    }
    out.seq = r.seq;
    ++out.records;
  }
  out.journal_bytes += reader.end();
  out.journal = path;
  out.journal_valid_bytes = reader.end();
  return boost::outcome_v2::success();
}

Result<Recovered> recover(const fs::path& dir, MetadataState& state) {
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
      return Error{Errc::inconsistent,
                   "snapshot " + path.string() + ": holds change " + std::to_string(loaded.value().image.seq)};
    }
    named_journal = loaded.value().next_journal;
    out.dedup = std::move(loaded.value().dedup);
    if (auto imported = state.import_image(std::move(loaded.value().image)); !imported) {
      return Error{Errc::inconsistent, "snapshot " + path.string() + ": " + imported.error().message};
    }
    out.snapshot_seq = seq;
    if (!fs::exists(dir / *named_journal)) {
      return Error{Errc::inconsistent, "snapshot " + path.string() + " names " + (dir / *named_journal).string() +
                                           ", which is missing"};
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
      return Error{Errc::inconsistent, "journal " + path.string() + " starts at record " + std::to_string(first) +
                                           ", expected " + std::to_string(out.seq + 1) + ": changes " +
                                           std::to_string(out.seq + 1) + " to " + std::to_string(first - 1) +
                                           " are missing (a journal file is missing or was cut)"};
    }
    auto bytes = read_file(path);
    if (!bytes) return std::move(bytes).error();
    auto replayed = replay_journal(path, bytes.value().bytes(), last, state, out);
    if (!replayed) return std::move(replayed).error();
    out.journal_first_seq = first;
  }
  return out;
}

Result<void> sync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Error{Errc::io, dir.string() + ": " + errno_text(errno)};
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return Error{Errc::io, "fsync " + dir.string() + ": " + errno_text(err)};
  return boost::outcome_v2::success();
}

Result<std::uint64_t> cut_journal_after_snapshot(const fs::path& dir) {
  auto listing = list(dir);
  if (!listing) return std::move(listing).error();
  const auto& snapshots = listing.value().snapshots;
  const std::uint64_t seq = snapshots.empty() ? 0 : snapshots.rbegin()->first;
  const std::size_t header = file_header(kJournalMagic).size();
  bool kept = false;  // the first file after the snapshot stays (the snapshot names it), empty
  for (const auto& [first, path] : listing.value().journals) {
    if (first <= seq) continue;
    if (kept) {
      if (::unlink(path.c_str()) != 0) return Error{Errc::io, "unlink " + path.string() + ": " + errno_text(errno)};
      continue;
    }
    kept = true;
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    const bool cut = fd >= 0 && ::ftruncate(fd, static_cast<off_t>(header)) == 0 && ::fdatasync(fd) == 0;
    const int err = errno;
    if (fd >= 0) ::close(fd);
    if (!cut) return Error{Errc::io, "cutting " + path.string() + " back to its header: " + errno_text(err)};
  }
  if (auto synced = sync_dir(dir); !synced) return std::move(synced).error();
  return seq;
}

Result<FileBytes> map_newest_snapshot(const fs::path& dir) {
  auto listing = list(dir);
  if (!listing) return std::move(listing).error();
  if (listing.value().snapshots.empty()) return FileBytes();
  return read_file(listing.value().snapshots.rbegin()->second, /*populate=*/false);
}

std::uint64_t newest_snapshot_seq(const fs::path& dir) {
  auto listing = list(dir);
  return listing && !listing.value().snapshots.empty() ? listing.value().snapshots.rbegin()->first : 0;
}

Result<std::uint64_t> install_snapshot(const fs::path& dir, std::string_view bytes, std::uint64_t after) {
  auto loaded = read_snapshot("the fetched snapshot", bytes);
  if (!loaded) return std::move(loaded).error();
  const std::uint64_t seq = loaded.value().image.seq;
  if (seq <= after) {
    return Error{Errc::inconsistent, "the fetched snapshot holds change " + std::to_string(seq) +
                                         ", not past this state's " + std::to_string(after)};
  }
  std::error_code ec;
  fs::create_directories(dir, ec);  // a member's first start
  if (ec) return Error{Errc::io, dir.string() + ": " + ec.message()};
  // The journal the snapshot names exists before the snapshot does (as Store::snapshot makes them).
  const std::string next = journal_name(seq + 1);
  const fs::path journal = dir / next;
  const int fd = ::open(journal.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Error{Errc::io, journal.string() + ": " + errno_text(errno)};
  const int write_error = write_all(fd, file_header(kJournalMagic));
  const bool written = write_error == 0 && ::fsync(fd) == 0;
  const int err = write_error != 0 ? write_error : errno;
  ::close(fd);
  if (!written) return Error{Errc::io, journal.string() + ": " + errno_text(err)};
  auto snapshot = write_snapshot(dir, loaded.value().image, loaded.value().dedup, next);
  if (!snapshot) return std::move(snapshot).error();
  // Everything else goes: older files, and any newer journal of a history the cluster left behind.
  remove_before(dir, seq);
  if (auto listing = list(dir)) {
    for (const auto& [first, path] : listing.value().journals) {
      if (first > seq + 1) ::unlink(path.c_str());
    }
  }
  if (auto synced = sync_dir(dir); !synced) return std::move(synced).error();
  return seq;
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
    const bool ours = name == kFetchedSnapshotName ||
                      (name.ends_with(".tmp") && number_of(name.substr(0, name.size() - 4), "snapshot-", ".snap"));
    if (!ours) continue;
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

Result<DirLock> DirLock::acquire(const fs::path& dir) {
  // The lock is on the directory: a file in it (LOCK included) can be deleted while a server runs.
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Error{Errc::io, dir.string() + ": " + errno_text(errno)};
  const fs::path path = dir / "LOCK";
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const auto listed = err == EWOULDBLOCK ? flock_holder(fd) : std::nullopt;
    ::close(fd);
    if (err != EWOULDBLOCK) return Error{Errc::io, "flock " + dir.string() + ": " + errno_text(err)};
    std::string holder = listed ? *listed + " (" + path.string() + ", which names it, was deleted)"
                                : "unknown (" + path.string() + ", which names it, was deleted)";
    if (const int pid_fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC); pid_fd >= 0) {
      char pid[32] = {};
      const ssize_t n = ::read(pid_fd, pid, sizeof pid - 1);
      ::close(pid_fd);
      holder = n > 0 ? std::string(pid, static_cast<std::size_t>(n)) : "unknown (" + path.string() + " is empty)";
      while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    }
    return Error{Errc::in_use, "data dir " + dir.string() + " is in use by process " + holder};
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  const int pid_fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const bool written = pid_fd >= 0 && ::write(pid_fd, pid.data(), pid.size()) == static_cast<ssize_t>(pid.size());
  const int err = errno;
  if (pid_fd >= 0) ::close(pid_fd);
  if (!written) {
    ::close(fd);
    return Error{Errc::io, "write " + path.string() + ": " + errno_text(err)};
  }
  return DirLock(fd);
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace hf3fs_meta::durable
