#include "durable/journal.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

#include "durable/log_format.hpp"
#include "durable/log_reader.hpp"
#include "durable/log_writer.hpp"

namespace hf3fs_meta::durable {
namespace {

thread_local const DedupTag* t_tag = nullptr;
thread_local std::uint64_t t_seq = 0;

// The journal's write(2) and fdatasync, unless a disk error was injected (data_dir.hpp).
int journal_write(int fd, std::string_view bytes) {
  if (const int err = take_injected_error(DiskOp::journal_write)) return err;
  return write_all(fd, bytes);
}
int journal_sync(int fd) {
  if (const int err = take_injected_error(DiskOp::journal_sync)) return err;
  return ::fdatasync(fd) == 0 ? 0 : errno;
}

}  // namespace

std::optional<FsyncMode> parse_fsync_mode(std::string_view text) {
  for (const auto& m : kFsyncModes) {
    if (m.name == text) return m.mode;
  }
  return std::nullopt;
}

std::string_view to_string(FsyncMode mode) noexcept {
  for (const auto& m : kFsyncModes) {
    if (m.mode == mode) return m.name;
  }
  return "?";
}

std::string fsync_mode_names(std::string_view separator) {
  std::string out;
  for (const auto& m : kFsyncModes) {
    if (!out.empty()) out += separator;
    out += m.name;
  }
  return out;
}

TagScope::TagScope(const DedupTag* tag) noexcept : previous_(t_tag) { t_tag = tag; }
TagScope::~TagScope() { t_tag = previous_; }

std::uint64_t Journal::thread_seq() noexcept { return t_seq; }
void Journal::reset_thread_seq() noexcept { t_seq = 0; }

Journal::Journal(Options options) : options_(std::move(options)) {
  if (options_.replicate) options_.mode = FsyncMode::no;  // see Options::replicate
}

Result<std::unique_ptr<Journal>> Journal::open(Options options, const Recovered& recovered) {
  std::unique_ptr<Journal> j(new Journal(std::move(options)));
  j->appended_ = j->written_ = j->durable_ = j->handed_ = recovered.seq;
  if (!recovered.journal.empty() && recovered.journal_valid_bytes >= kFileHeaderSize) {
    const int fd = ::open(recovered.journal.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return Error{Errc::io, recovered.journal.string() + ": " + errno_text(errno)};
    // A torn record at the end (recovery left it out) goes, so that the next record follows the last whole one.
    if (::ftruncate(fd, static_cast<off_t>(recovered.journal_valid_bytes)) != 0 ||
        ::lseek(fd, 0, SEEK_END) < 0) {
      const int err = errno;
      ::close(fd);
      return Error{Errc::io, "truncate " + recovered.journal.string() + ": " + errno_text(err)};
    }
    j->fd_ = fd;
    j->file_first_seq_ = recovered.journal_first_seq;
    j->file_bytes_ = recovered.journal_valid_bytes;
  } else {
    const std::uint64_t first = recovered.journal.empty() ? recovered.seq + 1 : recovered.journal_first_seq;
    if (auto opened = j->open_file(first, true); !opened) return std::move(opened).error();
    if (::fsync(j->fd_) != 0) {
      return Error{Errc::io, "fsync " + (j->options_.dir / journal_name(first)).string() + ": " + errno_text(errno)};
    }
    if (auto synced = sync_dir(j->options_.dir); !synced) return std::move(synced).error();
  }
  j->acked_ = Acked{recovered.seq, j->file_first_seq_, j->file_bytes_};
  j->retain_recovered(recovered.dedup);
  j->syncer_ = std::thread([p = j.get()] { p->sync_loop(); });
  if (j->options_.replicate) {
    for (std::size_t i = 0; i < std::max<std::size_t>(j->options_.replicate_in_flight, 1); ++i) {
      j->replicators_.emplace_back([p = j.get()] { p->replicate_loop(); });
    }
  }
  return j;
}

// Opens journal-<first_seq>.log, new, with its header; becomes the current file (write mutex held
// or no other thread yet).
Result<void> Journal::open_file(std::uint64_t first_seq, bool create) {
  const auto path = options_.dir / journal_name(first_seq);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Error{Errc::io, path.string() + ": " + errno_text(errno)};
  if (const int err = write_all(fd, file_header(kJournalMagic))) {
    ::close(fd);
    ::unlink(path.c_str());
    return Error{Errc::io, "write " + path.string() + ": " + errno_text(err)};
  }
  std::lock_guard lock(mutex_);
  if (!create) retired_fds_.push_back(fd_);
  fd_ = fd;
  file_first_seq_ = first_seq;
  file_bytes_ = kFileHeaderSize;
  return boost::outcome_v2::success();
}

Journal::~Journal() {
  // A failure here has no caller left to answer (fail() recorded it): the files keep what got out,
  // and recovery cuts a torn tail.
  (void)write_through(~std::uint64_t{0} >> 1);
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_syncer_.notify_all();
  wake_replicators_.notify_all();
  replication_settled_.notify_all();
  if (syncer_.joinable()) syncer_.join();
  for (std::thread& replicator : replicators_) replicator.join();
  for (const int fd : retired_fds_) {
    if (!failure_) ::fdatasync(fd);
    ::close(fd);
  }
  if (fd_ >= 0) {
    if (!failure_) ::fdatasync(fd_);
    ::close(fd_);
  }
}

void Journal::append(const Change& change) {
  std::lock_guard lock(mutex_);
  std::string& out = rotation_ ? next_buffer_ : buffer_;
  const std::size_t at = out.size();
  // An eviction before an allocate, a reclaim at the start of a call: only the request's own record
  // carries its id.
  const DedupTag* const tag = is_lifecycle(change.kind) ? nullptr : t_tag;
  encode_record(change, tag, out);
  const std::size_t size = out.size() - at;
  appended_ = change.seq;
  t_seq = change.seq;
  ++stats_.records;
  bytes_since_rotation_ += size;
  if (tag) {
    // The time lets a restart give the answer only what is left of its window.
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    retain_tagged(dedup_entry(change.seq, *tag, change, std::chrono::duration_cast<std::chrono::milliseconds>(now).count()));
  }
}

void Journal::retain_recovered(const std::vector<DedupEntry>& recovered) {
  // An answer replayed from a journal has no time: its window starts now, in the cache as here.
  const std::int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                  std::chrono::system_clock::now().time_since_epoch()).count();
  for (DedupEntry e : recovered) {
    if (e.at_ms == 0) e.at_ms = now_ms;
    retain_tagged(std::move(e));
  }
}

void Journal::retain_tagged(DedupEntry tagged) {
  tagged_bytes_ += dedup_weight(tagged.tag.ns, tagged.tag.id, tagged.pages.size());
  tagged_.push_back(std::move(tagged));
  while (tagged_bytes_ > options_.dedup_retained_bytes) {
    tagged_bytes_ -= dedup_weight(tagged_.front().tag.ns, tagged_.front().tag.id, tagged_.front().pages.size());
    tagged_.pop_front();
  }
}

void Journal::fail_locked(std::string error, bool disk) {
  if (disk) ++stats_.disk_errors;
  if (!failure_) failure_ = std::move(error);
  // Memory may now hold changes whose records will not be acknowledged (their callers get 503).
  rollback_pending_.store(true, std::memory_order_release);
  failed_.store(true, std::memory_order_release);
}

void Journal::ack_written_locked() {
  if (options_.mode != FsyncMode::always && !options_.replicate) acked_ = Acked{written_, file_first_seq_, file_bytes_};
}

void Journal::keep_for_replication_locked(std::string& records, std::uint64_t offset) {
  if (!options_.replicate || records.empty()) return;
  unreplicated_.push_back(Written{std::move(records), file_first_seq_, offset});
  wake_replicators_.notify_all();  // (all: the one gathering must hear of it, whichever else waits)
}

Journal::Batch Journal::take_batch_locked() {
  Batch batch;
  while (!unreplicated_.empty()) {
    Written& front = unreplicated_.front();
    // Whole records (log_format.hpp: u64 seq, u32 payload length, u32 crc, payload, u32 crc) while
    // they fit, and at least one.
    std::size_t taken = 0;
    while (taken < front.records.size()) {
      const RecordSpan record = record_span(std::string_view(front.records).substr(taken));
      if ((!batch.records.empty() || taken > 0) &&
          batch.records.size() + taken + record.size > options_.replicate_batch_bytes) {
        break;
      }
      taken += record.size;
      batch.end = Acked{record.seq, front.file_first_seq, front.offset + taken};
      handed_ = record.seq;
    }
    batch.records.append(front.records, 0, taken);
    if (taken < front.records.size()) {
      front.records.erase(0, taken);
      front.offset += taken;
      break;
    }
    unreplicated_.pop_front();
  }
  return batch;
}

void Journal::replicate_loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    // (After a local failure too: what was written before it is still replicated.)
    wake_replicators_.wait(lock, [&] {
      return stopping_ || (!gathering_ && !unreplicated_.empty() && in_flight_.size() < options_.replicate_in_flight);
    });
    if (stopping_) return;
    if (options_.replicate_gather.count() > 0 && in_flight_.empty()) gather_locked(lock);
    if (stopping_) return;
    replicate_locked(lock);
  }
}

void Journal::gather_locked(std::unique_lock<std::mutex>& lock) {
  gathering_ = true;
  const auto until = std::chrono::steady_clock::now() + options_.replicate_gather;
  wake_replicators_.wait_until(lock, until, [&] { return stopping_ || written_ - handed_ >= gather_for_; });
  gathering_ = false;
}

void Journal::replicate_locked(std::unique_lock<std::mutex>& lock) {
  // A list: each call's element stays put while others are added and settled.
  const auto slot = in_flight_.insert(in_flight_.end(), InFlight{take_batch_locked(), std::nullopt});
  // More waiting, and room for another call: a replicator of its own takes it.
  if (!unreplicated_.empty()) wake_replicators_.notify_all();
  lock.unlock();
  Result<void> replicated = options_.replicate(slot->batch.records, slot->batch.end.seq);
  lock.lock();
  slot->outcome = std::move(replicated);
  settle_replicated_locked(lock);
}

void Journal::settle_replicated_locked(std::unique_lock<std::mutex>& lock) {
  std::multimap<std::uint64_t, Done> acknowledged;
  std::multimap<std::uint64_t, Done> refused;
  while (!in_flight_.empty() && in_flight_.front().outcome) {
    const InFlight settled = std::move(in_flight_.front());
    in_flight_.pop_front();
    if (!*settled.outcome) {
      // Nothing after the last record replicated ever will be: every waiter is told, and the rest
      // of what was written is rolled back with it. (A batch in flight after this one cannot be
      // taken by the log unless this one was: its append follows this one's records.)
      fail_locked("replication failed: " + settled.outcome->error().message, /*disk=*/false);
      unreplicated_.clear();
      refused.merge(waiters_);
    } else {
      // In the log, so applied, whatever failed locally meanwhile: acknowledged, and roll_back
      // (which waits for this) keeps it.
      durable_ = std::max(durable_, settled.batch.end.seq);
      // The clients this batch answered, and those that wrote meanwhile: what the next one waits for.
      gather_for_ = settled.batch.end.seq - record_span(settled.batch.records).seq + 1 + (written_ - handed_);
      if (settled.batch.end.seq > acked_.seq) acked_ = settled.batch.end;
      const auto end = waiters_.upper_bound(durable_);
      acknowledged.insert(std::make_move_iterator(waiters_.begin()), std::make_move_iterator(end));
      waiters_.erase(waiters_.begin(), end);
    }
  }
  replication_settled_.notify_all();
  wake_replicators_.notify_all();  // a call ended: room for another
  if (acknowledged.empty() && refused.empty()) return;
  const Result<void> failure = refused.empty() ? Result<void>(boost::outcome_v2::success()) : writable_locked();
  lock.unlock();
  for (auto& [seq, done] : acknowledged) done(boost::outcome_v2::success());
  for (auto& [seq, done] : refused) done(failure);
  lock.lock();
}

void Journal::fail(std::string error) {
  std::multimap<std::uint64_t, Done> waiters;
  Result<void> failure = boost::outcome_v2::success();
  {
    std::lock_guard lock(mutex_);
    fail_locked(std::move(error));
    waiters = take_unacknowledgeable_locked();
    failure = writable_locked();
  }
  for (auto& [seq, done] : waiters) done(failure);
}

bool Journal::replication_pending_locked(std::uint64_t seq) const {
  return options_.replicate && seq <= written_ && (!in_flight_.empty() || !unreplicated_.empty());
}

std::multimap<std::uint64_t, Journal::Done> Journal::take_unacknowledgeable_locked() {
  std::multimap<std::uint64_t, Done> out;
  // Replicated: what was written before the failure is still replicated, and its outcome (not
  // this failure) answers it. The rest was never written, so it never will be.
  const auto first = replication_pending_locked(written_) ? waiters_.upper_bound(written_) : waiters_.begin();
  out.insert(std::make_move_iterator(first), std::make_move_iterator(waiters_.end()));
  waiters_.erase(first, waiters_.end());
  return out;
}

Result<void> Journal::writable_locked() const {
  if (!failure_) return boost::outcome_v2::success();
  return Error{Errc::journal_failed, *failure_};
}

Result<void> Journal::write_through(std::uint64_t seq) {
  std::lock_guard writer(write_mutex_);
  for (;;) {
    std::string out;
    std::uint64_t upto = 0;
    bool switch_after = false;
    int fd = -1;
    std::uint64_t offset = 0;
    {
      std::lock_guard lock(mutex_);
      // Written before a failure: with everysec and no it is acknowledged, and the roll back keeps
      // it, so its caller must not answer 503 "nothing applied" (with always or replicated, its
      // waiter on when_durable is told the outcome). Checked before the failure for that reason.
      if (written_ >= seq) return boost::outcome_v2::success();
      if (failure_) return writable_locked();
      if (written_ >= appended_) return boost::outcome_v2::success();
      out.swap(buffer_);
      upto = rotation_ ? *rotation_ - 1 : appended_;
      switch_after = rotation_.has_value() && *rotation_ <= seq;
      fd = fd_;
      offset = file_bytes_;
    }
    if (const int err = journal_write(fd, out)) {
      // Cut what part of the batch got out, so that the file ends with a whole record.
      [[maybe_unused]] const int ignored = ::ftruncate(fd, static_cast<off_t>(offset));
      fail("journal write failed: " + errno_text(err));
      return writable();
    }
    {
      std::lock_guard lock(mutex_);
      file_bytes_ += out.size();
      stats_.bytes += out.size();
      written_ = std::max(written_, upto);
      ack_written_locked();
      keep_for_replication_locked(out, offset);
    }
    if (switch_after) {
      if (auto switched = switch_file(); !switched) return std::move(switched).error();
    }
  }
}

// Write mutex held, rotation pending, the records before it written: the records after it go to a
// new file, opened here; finish_rotation makes it durable (no fsync on an I/O thread).
Result<void> Journal::switch_file() {
  std::uint64_t first = 0;
  {
    std::lock_guard lock(mutex_);
    first = *rotation_;
  }
  if (auto opened = open_file(first, false); !opened) {
    fail("journal file could not be created: " + opened.error().message);
    return writable();
  }
  std::lock_guard lock(mutex_);
  buffer_ = std::move(next_buffer_);
  next_buffer_.clear();
  rotation_.reset();
  wake_syncer_.notify_all();
  return boost::outcome_v2::success();
}

void Journal::when_durable(std::uint64_t seq, Done done) {
  Result<void> durable = boost::outcome_v2::success();
  {
    std::lock_guard lock(mutex_);
    if (durable_ >= seq) {
      // acknowledged before any failure: a failure since takes nothing back
    } else if (!failure_ || replication_pending_locked(seq)) {
      waiters_.emplace(seq, std::move(done));
      wake_syncer_.notify_all();
      return;
    } else {
      durable = writable_locked();
    }
  }
  done(durable);
}

void Journal::rotate_at(std::uint64_t seq) {
  std::lock_guard lock(mutex_);
  if (rotation_) {
    // A second instant before the first rotation finished (export_image started over): the old
    // file takes the records up to the new point.
    buffer_ += next_buffer_;
    next_buffer_.clear();
  }
  rotation_ = seq + 1;
  bytes_since_rotation_ = 0;
}

std::vector<DedupEntry> Journal::tagged_up_to(std::uint64_t seq) const {
  constexpr std::size_t kChunk = 4096;
  std::vector<DedupEntry> out;
  for (;;) {
    std::lock_guard lock(mutex_);
    // The kept records are in seq order; the front may have gone since the last chunk.
    auto it = tagged_.begin();
    if (!out.empty()) {
      it = std::upper_bound(tagged_.begin(), tagged_.end(), out.back().seq,
                            [](std::uint64_t s, const DedupEntry& t) { return s < t.seq; });
    }
    std::size_t copied = 0;
    for (; it != tagged_.end() && it->seq <= seq && copied < kChunk; ++it, ++copied) out.push_back(*it);
    if (copied < kChunk) return out;
  }
}

Result<Journal::FileName> Journal::finish_rotation() {
  std::unique_lock writer(write_mutex_);
  std::string out;
  int fd = -1;
  std::uint64_t offset = 0;
  std::uint64_t upto = 0;
  bool failed = false;
  {
    std::lock_guard lock(mutex_);
    if (!rotation_) return FileName{journal_name(file_first_seq_)};
    out.swap(buffer_);
    fd = fd_;
    offset = file_bytes_;
    upto = *rotation_ - 1;
    failed = failure_.has_value();
  }
  // The records up to the rotation point go to the old file; if the journal failed, the snapshot
  // being written holds them instead.
  if (!failed) {
    if (const int err = journal_write(fd, out)) {
      [[maybe_unused]] const int ignored = ::ftruncate(fd, static_cast<off_t>(offset));
      fail("journal write failed: " + errno_text(err));
    } else {
      std::lock_guard lock(mutex_);
      file_bytes_ += out.size();
      stats_.bytes += out.size();
      written_ = std::max(written_, upto);
      ack_written_locked();
      keep_for_replication_locked(out, offset);
    }
  }
  if (auto switched = switch_file(); !switched) return std::move(switched).error();
  std::string name;
  {
    std::lock_guard lock(mutex_);
    fd = fd_;
    name = journal_name(file_first_seq_);
  }
  writer.unlock();
  // Only this thread retires the current file (at the next rotation), so fd stays open meanwhile.
  if (::fsync(fd) != 0) return Error{Errc::io, "fsync " + (options_.dir / name).string() + ": " + errno_text(errno)};
  if (auto synced = sync_dir(options_.dir); !synced) return std::move(synced).error();
  return FileName{name};
}

void Journal::abandon_rotation() {
  std::lock_guard writer(write_mutex_);
  std::lock_guard lock(mutex_);
  // A failed journal writes nothing, so the file the rotation opened is empty: gone, it cannot
  // stand between the last records on disk and the recovery that reads them.
  if (failure_ && file_bytes_ == kFileHeaderSize) ::unlink((options_.dir / journal_name(file_first_seq_)).c_str());
}

void Journal::clear_failure(std::uint64_t snapshot_seq) {
  std::multimap<std::uint64_t, Done> woken;
  {
    std::lock_guard lock(mutex_);
    // The snapshot holds every change up to it; the current file follows it (finish_rotation).
    written_ = std::max(written_, snapshot_seq);
    durable_ = std::max(durable_, snapshot_seq);
    // (Also when acknowledged exactly to the snapshot: the earlier file it points into goes.)
    if (acked_.seq <= snapshot_seq && file_first_seq_ == snapshot_seq + 1) {
      acked_ = Acked{snapshot_seq, file_first_seq_, kFileHeaderSize};
    }
    woken.insert(waiters_.begin(), waiters_.upper_bound(durable_));
    waiters_.erase(waiters_.begin(), waiters_.upper_bound(durable_));
    failure_.reset();
    failed_.store(false, std::memory_order_release);
  }
  const Result<void> durable = boost::outcome_v2::success();
  for (auto& [seq, done] : woken) done(durable);
}

Result<std::uint64_t> Journal::roll_back() {
  std::lock_guard writer(write_mutex_);
  std::unique_lock lock(mutex_);
  // Replicated: what was written before the failure is replicated first (or that fails), so that
  // the point cut back to is one the log agrees with. A batch's outcome is never both.
  replication_settled_.wait(lock, [&] { return stopping_ || (in_flight_.empty() && unreplicated_.empty()); });
  const Acked a = acked_;
  const auto current = options_.dir / journal_name(file_first_seq_);
  std::uint64_t keep = a.bytes;
  if (a.file_first_seq != file_first_seq_) {
    // Acknowledged up to a point in an earlier file (a rotation happened since): that file is cut
    // there; the current one holds only records after it, and is emptied (or goes, when its name no
    // longer follows the last record kept).
    const auto earlier = options_.dir / journal_name(a.file_first_seq);
    if (::truncate(earlier.c_str(), static_cast<off_t>(a.bytes)) != 0) {
      return Error{Errc::io, "truncate " + earlier.string() + ": " + errno_text(errno)};
    }
    keep = kFileHeaderSize;
    if (file_first_seq_ != a.seq + 1 && ::unlink(current.c_str()) != 0 && errno != ENOENT) {
      return Error{Errc::io, "unlink " + current.string() + ": " + errno_text(errno)};
    }
  }
  // ftruncate needs no free block: it works on a full disk.
  if (::ftruncate(fd_, static_cast<off_t>(keep)) != 0) {
    return Error{Errc::io, "truncate " + current.string() + ": " + errno_text(errno)};
  }
  file_bytes_ = keep;
  buffer_.clear();
  next_buffer_.clear();
  unreplicated_.clear();
  rotation_.reset();
  appended_ = written_ = durable_ = handed_ = a.seq;
  while (!tagged_.empty() && tagged_.back().seq > a.seq) {
    tagged_bytes_ -= dedup_weight(tagged_.back().tag.ns, tagged_.back().tag.id, tagged_.back().pages.size());
    tagged_.pop_back();
  }
  return a.seq;
}

Result<void> Journal::continue_after(std::uint64_t seq, const std::vector<DedupEntry>& dedup) {
  std::lock_guard writer(write_mutex_);
  {
    std::lock_guard lock(mutex_);
    if (failure_ || rollback_pending() || rotation_ || acked_.seq != appended_ || seq <= appended_) {
      return Error{Errc::inconsistent, "a snapshot of change " + std::to_string(seq) +
                                           " cannot follow the journal at change " + std::to_string(appended_) +
                                           (failure_ ? " (failed)" : rotation_ ? " (rotating)" : " (not all acknowledged)")};
    }
  }
  // install_snapshot made the file: opened anew (the same header), the old one retired to the syncer.
  if (auto opened = open_file(seq + 1, false); !opened) return opened;
  std::lock_guard lock(mutex_);
  appended_ = written_ = durable_ = handed_ = seq;
  acked_ = Acked{seq, file_first_seq_, file_bytes_};
  bytes_since_rotation_ = 0;
  tagged_.clear();
  tagged_bytes_ = 0;
  retain_recovered(dedup);
  wake_syncer_.notify_all();
  return boost::outcome_v2::success();
}

void Journal::sync_loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    const auto due = [&] {
      if (!retired_fds_.empty()) return true;
      if (options_.mode == FsyncMode::always) return !waiters_.empty() && written_ > durable_;
      return false;
    };
    if (options_.mode == FsyncMode::everysec) {
      wake_syncer_.wait_for(lock, std::chrono::seconds(1), [&] { return stopping_ || due(); });
    } else {
      wake_syncer_.wait(lock, [&] { return stopping_ || due(); });
    }
    if (stopping_) return;
    const std::uint64_t target = written_;
    const Acked synced{target, file_first_seq_, file_bytes_};  // what the sync of the current file covers
    const bool sync_current = !failure_ && target > durable_ && options_.mode != FsyncMode::no;
    std::vector<int> fds;
    fds.swap(retired_fds_);
    const int current = fd_;
    lock.unlock();
    std::optional<std::string> error;
    std::uint64_t syncs = 0;
    std::uint64_t ns_total = 0;
    std::uint64_t ns_max = 0;
    auto sync = [&](int fd) {
      const auto start = std::chrono::steady_clock::now();
      if (const int err = journal_sync(fd); err != 0 && !error) error = "journal fdatasync failed: " + errno_text(err);
      const auto ns = static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
      ++syncs;
      ns_total += ns;
      ns_max = std::max(ns_max, ns);
    };
    for (const int fd : fds) sync(fd);
    if (sync_current) sync(current);
    for (const int fd : fds) ::close(fd);
    std::multimap<std::uint64_t, Done> woken;
    lock.lock();
    stats_.fsyncs += syncs;
    stats_.fsync_ns_total += ns_total;
    stats_.fsync_ns_max = std::max(stats_.fsync_ns_max, ns_max);
    if (error) {
      fail_locked(std::move(*error));
      woken = take_unacknowledgeable_locked();
    } else if (!failure_ && !options_.replicate && (sync_current || options_.mode == FsyncMode::no)) {
      // (After a failure its waiters were told so: what this sync covered stays unacknowledged.)
      durable_ = std::max(durable_, target);
      if (options_.mode == FsyncMode::always && synced.seq > acked_.seq) acked_ = synced;
      woken.insert(waiters_.begin(), waiters_.upper_bound(durable_));
      waiters_.erase(waiters_.begin(), waiters_.upper_bound(durable_));
    }
    if (!woken.empty()) {
      const Result<void> durable = error ? writable_locked() : boost::outcome_v2::success();
      lock.unlock();
      for (auto& [seq, done] : woken) done(durable);
      lock.lock();
    }
  }
}

std::uint64_t Journal::bytes_since_rotation() const {
  std::lock_guard lock(mutex_);
  return bytes_since_rotation_;
}

Result<void> Journal::writable() const {
  // Asked before every state change: no lock or copy while the disk is fine. A failure that sets the
  // flag just after this reads it is still met by write_through, which checks under the lock.
  if (!failed_.load(std::memory_order_acquire)) return boost::outcome_v2::success();
  std::lock_guard lock(mutex_);
  return writable_locked();
}

JournalStats Journal::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace hf3fs_meta::durable
