#include "durable/store.hpp"

#include <unistd.h>

#include <future>
#include <system_error>

#include "durable/snapshot.hpp"

namespace hf3fs_meta::durable {

Store::Store(Options options, MetadataState& state, DirLock lock)
    : options_(std::move(options)), state_(state), lock_(std::move(lock)) {}

Result<std::unique_ptr<Store>> Store::open(Options options, MetadataState& state) {
  std::error_code ec;
  std::filesystem::create_directories(options.dir, ec);
  if (ec) return Error{Errc::io, options.dir.string() + ": " + ec.message()};
  auto lock = DirLock::acquire(options.dir);
  if (!lock) return std::move(lock).error();
  std::unique_ptr<Store> store(new Store(options, state, std::move(lock).value()));
  // A snapshot a crash interrupted never became one (rename is its last step): only its bytes remain.
  auto removed = remove_temporaries(options.dir);
  if (options.replicate) {
    // The journal's tail may hold records the replicated log never took (a leader's last batch):
    // only the snapshot is trusted, and the log brings the rest (ha/member.hpp).
    if (auto cut = cut_journal_after_snapshot(options.dir); !cut) return std::move(cut).error();
  }
  const auto start = std::chrono::steady_clock::now();
  auto recovered = recover(options.dir, state);
  if (!recovered) return std::move(recovered).error();
  store->recovered_ = std::move(recovered).value();
  store->recovered_.removed_temporaries = std::move(removed);
  auto journal = Journal::open(Journal::Options{.dir = options.dir,
                                                 .mode = options.mode,
                                                 .dedup_retained_bytes = options.dedup_retained_bytes,
                                                 .replicate = options.replicate,
                                                 .replicate_in_flight = options.replicate_in_flight,
                                                 .replicate_gather = options.replicate_gather}, store->recovered_);
  if (!journal) return std::move(journal).error();
  store->journal_ = std::move(journal).value();
  store->stats_.recovery_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  store->stats_.last_snapshot_seq = store->recovered_.snapshot_seq;
  state.set_change_sink([j = store->journal_.get()](const Change& change) { j->append(change); });
  state.restarted();  // leases and recency were not recorded: the restart rule (state.hpp)
  store->thread_ = std::thread([s = store.get()] { s->background(); });
  return store;
}

Store::~Store() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  state_.set_change_sink({});
}

namespace {

// Waits until `seq` is acknowledged (when_durable), or its acknowledgement failed.
Result<void> acknowledged(Journal& journal, std::uint64_t seq) {
  std::promise<Result<void>> done;
  journal.when_durable(seq, [&done](const Result<void>& durable) { done.set_value(durable); });
  return done.get_future().get();
}

}  // namespace

Result<std::uint64_t> Store::snapshot() {
  std::lock_guard one(snapshot_mutex_);
  // Checked again at the end: a failure may come while the image is written.
  if (journal_->rollback_pending()) {
    std::lock_guard lock(mutex_);
    ++stats_.snapshot_failures;
    return Error{Errc::journal_failed, "a journal failure is not rolled back yet: it is rolled back first"};
  }
  const auto start = std::chrono::steady_clock::now();
  const StateImage image = state_.export_image([&](std::uint64_t seq) { journal_->rotate_at(seq); });
  const std::vector<DedupEntry> dedup = journal_->tagged_up_to(image.seq);
  auto next = journal_->finish_rotation();
  // Replicated (Journal::Options::replicate): the image may hold changes the replicated log does not
  // have yet; a snapshot of them would acknowledge them. So it waits for them, and is refused if
  // their replication fails.
  if (next && journal_->replicates()) {
    if (auto replicated = acknowledged(*journal_, image.seq); !replicated) next = std::move(replicated).error();
  }
  Result<std::uint64_t> written = next ? write_snapshot(options_.dir, image, dedup, next.value().name)
                                       : Result<std::uint64_t>(std::move(next).error());
  std::lock_guard lock(mutex_);
  if (written && journal_->rollback_pending()) {
    // A journal failure since the image was taken: it may hold changes answered 503, which must
    // not become durable. settle() first, then a snapshot.
    ::unlink((options_.dir / snapshot_name(image.seq)).c_str());
    written = Error{Errc::journal_failed, "a journal failure while the snapshot was taken: it is rolled back first"};
  }
  if (!written) {
    journal_->abandon_rotation();
    ++stats_.snapshot_failures;
    return written;
  }
  remove_before(options_.dir, image.seq);
  journal_->clear_failure(image.seq);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ++stats_.snapshots;
  stats_.last_snapshot_bytes = written.value();
  stats_.last_snapshot_seq = image.seq;
  stats_.last_snapshot_seconds = seconds;
  stats_.snapshot_seconds_total += seconds;
  return written;
}

Result<std::uint64_t> Store::settle() {
  if (!journal_->rollback_pending()) return state_.seq();
  std::unique_lock gate(gate_);
  std::lock_guard one(snapshot_mutex_);
  if (!journal_->rollback_pending()) return state_.seq();  // another caller did it meanwhile
  auto kept = journal_->roll_back();
  if (!kept) return kept;
  // The files now end at the last acknowledged change: recovered as at startup, into a state of
  // its own, then moved in whole (recovery needs an empty state; import_image records nothing).
  MetadataState fresh(state_.options());
  auto recovered = recover(options_.dir, fresh);
  if (!recovered) {
    return Error{recovered.error().code, "rolling back after a journal failure: " + recovered.error().message};
  }
  if (recovered.value().seq != kept.value()) {
    return Error{Errc::inconsistent, "rolling back after a journal failure: recovered change " +
                                         std::to_string(recovered.value().seq) + ", expected " +
                                         std::to_string(kept.value())};
  }
  if (auto imported = state_.import_image(fresh.export_image()); !imported) {
    return Error{Errc::inconsistent, "rolling back after a journal failure: " + imported.error().message};
  }
  state_.restarted();  // leases were not kept: every key counts as leased, as after a restart
  journal_->rollback_done();
  std::lock_guard lock(mutex_);
  ++stats_.rollbacks;
  return kept;
}

Result<std::vector<DedupEntry>> Store::install_snapshot(std::string_view bytes) {
  std::unique_lock gate(gate_);
  std::lock_guard one(snapshot_mutex_);
  const std::uint64_t had = state_.seq();
  if (auto written = journal_->write_through(had); !written) return std::move(written).error();
  if (auto acked = acknowledged(*journal_, had); !acked) return std::move(acked).error();
  const auto seq = durable::install_snapshot(options_.dir, bytes, /*after=*/had);
  if (!seq) return std::move(seq).error();
  // Recovered as at startup, into a state of its own, then moved in whole (as settle() does).
  MetadataState fresh(state_.options());
  auto recovered = recover(options_.dir, fresh);
  if (!recovered) return Error{recovered.error().code, "after installing a snapshot: " + recovered.error().message};
  if (auto imported = state_.import_image(fresh.export_image()); !imported) {
    return Error{Errc::inconsistent, "after installing a snapshot: " + imported.error().message};
  }
  if (auto continued = journal_->continue_after(seq.value(), recovered.value().dedup); !continued) {
    return std::move(continued).error();
  }
  state_.restarted();  // leases and recency were not in the snapshot: the restart rule
  std::lock_guard lock(mutex_);
  stats_.last_snapshot_seq = seq.value();
  return std::move(recovered.value().dedup);
}

Result<std::uint64_t> Store::shutdown() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (auto settled = settle(); !settled) return settled;
  return snapshot();
}

void Store::background() {
  // Polled: the journal's size and failure change under the state's lock, where waking a thread
  // would cost every request; a tenth of a second is far below the time a journal takes to grow by
  // --snapshot-after-bytes.
  std::unique_lock lock(mutex_);
  auto last_retry = std::chrono::steady_clock::now();
  while (!stopping_) {
    wake_.wait_for(lock, std::chrono::milliseconds(100), [&] { return stopping_; });
    if (stopping_) return;
    const bool failed = !journal_->writable();
    const bool full = options_.snapshot_after_bytes > 0 && journal_->bytes_since_rotation() >= options_.snapshot_after_bytes;
    const auto now = std::chrono::steady_clock::now();
    if (!full && !(failed && now - last_retry >= std::chrono::seconds(1))) continue;
    last_retry = now;
    lock.unlock();
    // A failure no request settled yet is rolled back first: a snapshot would be refused.
    if (auto settled = settle()) [[maybe_unused]] auto result = snapshot();
    lock.lock();
  }
}

Result<FileBytes> Store::newest_snapshot() const {
  std::lock_guard one(snapshot_mutex_);
  return map_newest_snapshot(options_.dir);
}

StoreStats Store::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace hf3fs_meta::durable
