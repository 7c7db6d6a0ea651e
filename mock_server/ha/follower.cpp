#include "ha/follower.hpp"

#include "ha/etcd_watch.hpp"

namespace hf3fs_meta::server::ha {

LogFollower::LogFollower(EtcdClient& etcd, const Keys& keys, std::uint64_t applied_seq, Apply apply, Ended ended,
                         Options options)
    : etcd_(etcd),
      keys_(keys),
      apply_(std::move(apply)),
      ended_(std::move(ended)),
      options_(options),
      applied_(applied_seq),
      thread_([this] { run(); }) {}

LogFollower::~LogFollower() { stop(); }

void LogFollower::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool LogFollower::wait_for(std::chrono::milliseconds duration) {
  std::unique_lock lock(mutex_);
  return !wake_.wait_for(lock, duration, [&] { return stopping_; });
}

void LogFollower::fail(EtcdError why) {
  std::lock_guard lock(mutex_);
  if (!failed_.exchange(true)) why_ = std::move(why);
  wake_.notify_all();
}

void LogFollower::watch_while_live() {
  const auto done = [&] { return stopping_ || watch_ended_ || failed_; };
  std::unique_lock lock(mutex_);
  std::uint64_t checked = applied();
  while (!wake_.wait_for(lock, options_.stall_check, done)) {
    lock.unlock();
    const auto tip = read_tip(etcd_, keys_);
    lock.lock();
    if (!tip) continue;
    if (options_.saw_tip) options_.saw_tip(tip.value().seq);
    // No entry since the last look while the log went on without the watch: stalled.
    if (applied() == checked && tip.value().seq > applied()) return;
    checked = applied();
  }
}

EtcdResult<void> check_follows(const LogEntry& entry, std::uint64_t applied, bool may_overlap) {
  return check_follows(entry, record_run(entry.batch), applied, may_overlap);
}

EtcdResult<void> check_follows(const LogEntry& entry, const EtcdResult<RecordRun>& run, std::uint64_t applied,
                               bool may_overlap) {
  if (run && run.value().last == entry.last_seq && entry.last_seq > applied &&
      (may_overlap ? run.value().first <= applied + 1 : run.value().first == applied + 1)) {
    return boost::outcome_v2::success();
  }
  const std::string holds = run ? "records " + std::to_string(run.value().first) + "-" + std::to_string(run.value().last)
                                : "no run of records (" + run.error().message + ")";
  return EtcdError{EtcdError::Kind::not_applied, 0,
                   "log entry " + std::to_string(entry.last_seq) + " (revision " + std::to_string(entry.revision) +
                       ") holds " + holds + ", which do not follow record " + std::to_string(applied) +
                       ", the last applied: the log has a gap or holds a record twice; nothing of it was applied"};
}

bool LogFollower::deliver(const LogEntry& entry) {
  if (failed_.load()) return false;
  // The same entry again (a catch-up read and the watch overlap): one put, one revision.
  if (delivered_revision_ != 0 && entry.revision <= delivered_revision_) return true;
  if (auto follows = check_follows(entry, applied(), !at_entry_end_); !follows) {
    fail(std::move(follows).error());
    return false;
  }
  if (auto applied = apply_(entry); !applied) {
    EtcdError why = applied.error();
    why.message = "log entry " + std::to_string(entry.last_seq) + " could not be applied: " + why.message;
    fail(std::move(why));
    return false;
  }
  applied_.store(entry.last_seq, std::memory_order_release);
  at_entry_end_ = true;
  delivered_revision_ = entry.revision;
  return true;
}

bool LogFollower::find_start() {
  const std::uint64_t from = applied();
  if (from == 0) {
    at_entry_end_ = true;  // the log's first entry begins at record 1
  } else {
    auto read = read_log(etcd_, keys_, from - 1, 1);
    if (!read && !read.error().needs_snapshot) return false;
    // Compacted away, the entry holding it ended there (else the one holding the next record would
    // be gone too, and following would need a snapshot). None: the log ends before the member's
    // last record, which no entry may then hold again.
    at_entry_end_ = !read || read.value().entries.empty() || read.value().entries.front().last_seq == from;
  }
  start_found_ = true;
  return true;
}

std::optional<std::int64_t> LogFollower::catch_up() {
  catch_ups_.fetch_add(1, std::memory_order_relaxed);
  if (!start_found_ && !find_start()) return std::nullopt;
  for (;;) {
    auto read = read_log(etcd_, keys_, applied(), options_.read_limit);
    if (!read) {
      // A log without what we need ends following; etcd not answering is worth another read.
      if (read.error().needs_snapshot) fail(read.error());
      return std::nullopt;
    }
    for (const LogEntry& entry : read.value().entries) {
      if (!deliver(entry)) return std::nullopt;
    }
    // Fewer than the limit: that read reached the tip at its revision.
    if (options_.read_limit == 0 || read.value().entries.size() < static_cast<std::size_t>(options_.read_limit)) {
      return read.value().revision;
    }
  }
}

void LogFollower::run() {
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_ || failed_) break;
      watch_ended_ = false;
    }
    const auto revision = catch_up();
    if (!revision) {
      if (failed_ || !wait_for(options_.retry_after)) break;
      continue;
    }
    EtcdWatch watch(
        etcd_.current_endpoint(), etcd_.options().connect_timeout, keys_.log_prefix(), prefix_end(keys_.log_prefix()), *revision + 1,
        [this](WatchResponse&& message) {
          for (WatchEvent& event : message.events) {
            if (event.type != WatchEvent::Type::put) continue;  // a compaction's deletes
            const std::uint64_t last_seq = keys_.seq_of(event.kv.key);
            if (last_seq != 0 && !deliver(LogEntry{last_seq, std::move(event.kv.value), event.kv.mod_revision})) return;
          }
        },
        [this](std::string) {  // the watch ended: read again from where we are, then watch again
          std::lock_guard lock(mutex_);
          watch_ended_ = true;
          wake_.notify_all();
        });
    const auto started = std::chrono::steady_clock::now();
    watch_while_live();
    watch.stop();
    // A watch that ended at once (a member refusing it, say) is not started again at once.
    if (std::chrono::steady_clock::now() - started < options_.retry_after && !wait_for(options_.retry_after)) break;
  }
  EtcdError why;
  {
    std::lock_guard lock(mutex_);
    if (stopping_ || !failed_) return;
    why = why_;
  }
  ended_(std::move(why));
}

}  // namespace hf3fs_meta::server::ha
