#include "ha/member.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <future>
#include <utility>

#include "ha/apply.hpp"

namespace hf3fs_meta::server::ha {
namespace {

EtcdOptions etcd_options(const MemberOptions& options) {
  EtcdOptions out;
  out.endpoints = options.etcd;
  out.request_timeout = std::min(options.etcd_attempt_timeout, options.etcd_timeout);
  out.call_timeout = options.etcd_timeout;
  return out;
}

ElectionOptions election_options(const MemberOptions& options, const Keys& keys) {
  ElectionOptions out;
  out.leader_key = keys.leader();
  out.advertise = options.advertise;
  out.ttl_seconds = options.ttl_seconds;
  return out;
}

// Waits until record `seq` is acknowledged or refused (Journal::when_durable).
durable::Result<void> settled(durable::Journal& journal, std::uint64_t seq) {
  std::promise<durable::Result<void>> done;
  journal.when_durable(seq, [&done](const durable::Result<void>& result) { done.set_value(result); });
  return done.get_future().get();
}

}  // namespace

Member::Member(MemberOptions options, MetadataState& state)
    : options_(std::move(options)),
      state_(state),
      keys_(options_.cluster),
      etcd_(etcd_options(options_)),
      election_(etcd_, [] { return std::chrono::steady_clock::now(); }, election_options(options_, keys_)),
      role_(election_.window()) {}

Member::~Member() { stop(); }

void Member::log(const std::string& line) const {
  std::fprintf(stderr, "hf3fs-meta-server: ha %s: %s\n", options_.name.c_str(), line.c_str());
}

durable::Result<void> Member::replicate(std::string_view records, std::uint64_t last_seq) {
  std::unique_lock lock(mode_mutex_);
  switch (mode_) {
    case Mode::following:
      return boost::outcome_v2::success();
    case Mode::closed:
      return durable::Error{durable::Errc::journal_failed, "this member is no longer the leader: not applied"};
    case Mode::leading:
      break;
  }
  LogWriter& writer = *writer_;  // kept while an append is in flight (set_mode_locked)
  ++appends_in_flight_;
  lock.unlock();
  const auto sent = std::chrono::steady_clock::now();
  auto appended = writer.append(records, last_seq);
  lock.lock();
  if (--appends_in_flight_ == 0) appends_ended_.notify_all();
  if (appended) {
    if (!appended.value().lost_answer.empty()) {
      log("the log took records up to " + std::to_string(last_seq) + " although an answer was lost (" +
          appended.value().lost_answer + ")");
    }
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - sent);
    role_.counters().appended(records.size(), static_cast<std::uint64_t>(ns.count()), last_seq);
    return boost::outcome_v2::success();
  }
  // Nothing more is acknowledged as leader: the Router stops answering now, the member's thread
  // stands down. (Appends still in flight end as the log says: none after this one can commit
  // unless this one did.)
  role_.demote();
  const bool first = mode_ == Mode::leading;
  mode_ = Mode::closed;
  const EtcdError& error = appended.error();
  const std::string why =
      error.kind == EtcdError::Kind::unknown
          ? "the replicated log did not answer (" + error.message +
                "): the outcome is unknown, the change may yet be applied; repeat it with the same X-Request-Id"
          : "the replicated log did not take it (" + error.message + "): not applied";
  if (first) {
    std::lock_guard wake(mutex_);
    lost_ = why;
  }
  wake_.notify_all();
  return durable::Error{durable::Errc::journal_failed, why};
}

EtcdResult<std::uint64_t> Member::fetch_snapshot_if_behind(const std::filesystem::path& dir) {
  auto fetched = ha::fetch_snapshot_if_behind(etcd_, keys_, dir, options_.snapshot_fetch);
  if (fetched && fetched.value() != 0) role_.counters().snapshot_fetches.fetch_add(1, std::memory_order_relaxed);
  return fetched;
}

void Member::start(durable::Store& store, Answers answers, std::string advertise) {
  state_.hold_clock(true);  // its state moves by the log until it leads
  options_.advertise = std::move(advertise);
  election_.set_advertise(options_.advertise);
  store_ = &store;
  answers_ = std::move(answers);
  thread_ = std::thread([this] { run(); });
}

void Member::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (!store_) return;
  if (stop_answering()) election_.resign();  // the leader key goes now, not a lease later
}

bool Member::stop_answering() {
  const bool led = role_.name() == RoleName::leader;
  role_.demote();
  state_.hold_clock(true);  // a standby's state moves by the log alone: none of its own expiries
  follower_.reset();
  switch_mode(Mode::closed);
  // What the log did not take is rolled back: the state is then the log's up to some seq.
  if (auto settled_store = store_->settle(); !settled_store) log("rolling back: " + settled_store.error().message);
  return led;
}

void Member::switch_mode(Mode mode) {
  // Every change admitted under the old mode has its record appended once the gate is free.
  store_->barrier();
  const std::uint64_t last = state_.seq();
  if (mode == Mode::closed) {
    std::unique_lock lock(mode_mutex_);
    set_mode_locked(lock, mode);
  }
  // Acknowledged or refused, each under the mode it was written in.
  (void)store_->journal().write_through(last);
  (void)settled(store_->journal(), last);
  std::unique_lock lock(mode_mutex_);
  set_mode_locked(lock, mode);
}

void Member::set_mode_locked(std::unique_lock<std::mutex>& lock, Mode mode) {
  appends_ended_.wait(lock, [&] { return appends_in_flight_ == 0; });
  mode_ = mode;
  if (mode != Mode::leading) writer_.reset();
}

void Member::run() {
  MemberCore core(MemberTiming{options_.poll, options_.compact_interval}, std::chrono::steady_clock::now());
  for (;;) {
    take_events(core);
    const MemberAction action = core.next(std::chrono::steady_clock::now(), facts());
    switch (action.kind) {
      case MemberAction::Kind::wait: wait_for_event(action.until); break;
      case MemberAction::Kind::stop: return;
      case MemberAction::Kind::stand_down: stand_down(action.why); break;
      case MemberAction::Kind::step_down_for_disk: step_down_for_disk(action.why); break;
      case MemberAction::Kind::resign: election_.resign(); break;
      case MemberAction::Kind::fetch_snapshot:
        core.fetched(catch_up_from_snapshot(), std::chrono::steady_clock::now());
        break;
      case MemberAction::Kind::renew: core.renewed(renew()); break;
      case MemberAction::Kind::check_leader_key: core.key_checked(holds_leader_key()); break;
      case MemberAction::Kind::campaign: core.campaigned(campaign()); break;
      case MemberAction::Kind::publish_applied: publish_applied(); break;
      case MemberAction::Kind::compact:
        if (auto compacted = compact(); !compacted) log("compacting the log: " + compacted.error().message);
        break;
    }
  }
}

MemberFacts Member::facts() const {
  const auto writable = store_->journal().writable();
  bool failed_this_term = false;
  {
    std::lock_guard lock(mode_mutex_);
    failed_this_term = mode_ == Mode::leading && store_->journal().stats().disk_errors > disk_errors_at_lead_;
  }
  return MemberFacts{writable.has_value() && !failed_this_term, election_.surely_alive(), renewal_interval(),
                     writable ? std::string() : writable.error().message};
}

void Member::take_events(MemberCore& core) {
  std::string lost;
  std::optional<EtcdError> ended;
  {
    std::lock_guard lock(mutex_);
    if (stopping_) core.stop();
    std::swap(lost, lost_);
    std::swap(ended, ended_);
  }
  if (!lost.empty()) core.append_lost(std::move(lost));
  if (!ended) return;
  if (ended->needs_snapshot) {
    log(ended->message + "; fetching the leader's snapshot");
  } else {
    log("following the log ended: " + ended->message);
    role_.log_failed(ended->message);
  }
  core.following_ended(ended->needs_snapshot);
}

void Member::wait_for_event(std::chrono::steady_clock::time_point until) {
  std::unique_lock lock(mutex_);
  wake_.wait_until(lock, until, [&] { return stopping_ || !lost_.empty() || ended_; });
}

RenewOutcome Member::renew() {
  auto renewed = election_.renew();
  if (!renewed) return RenewOutcome{false, false, renewed.error().message};
  return RenewOutcome{true, renewed.value(), {}};
}

void Member::publish_applied() {
  const std::int64_t lease = election_.lease_id();
  const std::uint64_t applied = state_.seq();
  if (lease == 0 || (applied == published_ && lease == published_lease_)) return;
  if (etcd_.put({keys_.member(options_.name), std::to_string(applied), lease})) {
    published_ = applied;
    published_lease_ = lease;
  }
}

EtcdResult<void> Member::compact() {
  // A member that is down has no key (its lease lapsed): it catches up through a snapshot.
  const std::string members = keys_.members_prefix();
  auto live = etcd_.range({members, prefix_end(members)});
  if (!live) return live.error();
  std::uint64_t upto = std::min(state_.seq(), store_->stats().last_snapshot_seq);
  for (const KeyValue& kv : live.value().kvs) {
    std::uint64_t applied = 0;
    const auto [end, ec] = std::from_chars(kv.value.data(), kv.value.data() + kv.value.size(), applied);
    if (ec != std::errc() || end != kv.value.data() + kv.value.size()) continue;  // not ours: ignored
    upto = std::min(upto, applied);
  }
  if (upto <= compacted_) return boost::outcome_v2::success();
  // Entries are keyed by their last record: those up to `upto` hold nothing anyone needs.
  auto deleted = etcd_.delete_range({keys_.log_prefix(), keys_.entry(upto + 1)});
  if (!deleted) return deleted.error();
  if (auto compacted = etcd_.compact(deleted.value().revision); !compacted) return compacted.error();
  compacted_ = upto;
  role_.counters().compactions.fetch_add(1, std::memory_order_relaxed);
  return boost::outcome_v2::success();
}

bool Member::holds_leader_key() {
  auto holder = etcd_.range({keys_.leader()});
  if (!holder) return true;  // unknown: the lease decides
  return !holder.value().kvs.empty() && holder.value().kvs.front().create_revision == fence_;
}

std::chrono::milliseconds Member::renewal_interval() const {
  return std::chrono::milliseconds(std::max<std::int64_t>(election_.ttl_seconds(), 1) * 1000 / 3);
}

CampaignOutcome Member::campaign() {
  auto outcome = election_.campaign();
  if (!outcome) {
    if (role_.name() != RoleName::candidate) log("etcd does not say who leads: " + outcome.error().message);
    role_.set(RoleName::candidate, {});
    return CampaignOutcome{CampaignOutcome::Kind::unanswered};
  }
  if (!outcome.value().won) {
    role_.set(outcome.value().leader.empty() ? RoleName::candidate : RoleName::standby, outcome.value().leader);
    return CampaignOutcome{CampaignOutcome::Kind::lost};
  }
  if (auto led = lead(outcome.value().fence); !led) {
    log("won the election but cannot lead: " + led.error().message);
    return CampaignOutcome{CampaignOutcome::Kind::cannot_lead};  // the core has it resign
  }
  return CampaignOutcome{CampaignOutcome::Kind::led};
}

EtcdResult<void> Member::lead(std::int64_t fence) {
  follower_.reset();
  const std::uint64_t from = state_.seq();
  auto tip = read_tip(etcd_, keys_);
  if (!tip) return tip.error();
  // As a follower does (follower.hpp): only the first entry may hold records the state has.
  bool first = true;
  while (state_.seq() < tip.value().seq) {
    auto read = read_log(etcd_, keys_, state_.seq(), LogFollower::Options{}.read_limit);  // a bounded answer
    if (!read) return read.error();
    for (const LogEntry& entry : read.value().entries) {
      if (auto follows = check_follows(entry, state_.seq(), first); !follows) return follows;
      first = false;
      if (auto applied = apply(entry); !applied) return applied;
    }
  }
  if (state_.seq() != tip.value().seq) {
    return EtcdError{EtcdError::Kind::not_applied, 0,
                     "this member's data dir holds change " + std::to_string(state_.seq()) +
                         ", past the log's tip " + std::to_string(tip.value().seq) +
                         ": it was not written by this cluster"};
  }
  // The lease the campaign won with may be near its end: renewed, so that the new leader answers at
  // once and for a whole lease.
  auto renewed = election_.renew();
  if (!renewed) return renewed.error();
  if (!renewed.value()) return EtcdError{EtcdError::Kind::not_applied, 0, "the lease lapsed while catching up"};
  switch_mode(Mode::following);  // the log's records acknowledged
  {
    std::lock_guard lock(mode_mutex_);
    writer_.emplace(etcd_, keys_, fence, tip.value());
    fence_ = fence;
    disk_errors_at_lead_ = store_->journal().stats().disk_errors;
    mode_ = Mode::leading;
  }
  // Leases and recency were not replicated: every key counts as read-leased for one lease period,
  // as after a restart (the records it makes, if any, go to the log). Its clock runs from now on:
  // what expired while it followed expires now, as the leader's records.
  state_.hold_clock(false);
  state_.restarted();
  (void)store_->journal().write_through(state_.seq());
  role_.set(RoleName::leader, options_.advertise);
  log("leads from change " + std::to_string(state_.seq()) + " (fence " + std::to_string(fence) +
      ", caught up from change " + std::to_string(from) + ")");
  return boost::outcome_v2::success();
}

void Member::stand_down(const std::string& why) {
  const bool led = stop_answering();
  // A failed journal writes again once a snapshot is taken (of changes the log has).
  if (!store_->journal().writable()) (void)store_->snapshot();
  switch_mode(Mode::following);
  if (led) log("stepped down: " + why);
  start_following();
}

void Member::step_down_for_disk(const std::string& why) {
  // What was written before the failure goes to the log first, its callers told the log's answer
  // (Store::settle waits for it, then rolls back what was never written): nothing the log took is
  // answered "not applied", and the state ends where the log does.
  if (auto settled_store = store_->settle(); !settled_store) log("rolling back: " + settled_store.error().message);
  stand_down(why);
  // The lease goes now, not a lease later; the others campaign first (the core waits a while).
  election_.resign();
}

void Member::start_following() {
  LogFollower::Options options;
  // The entries applied say the tip only up to them: a follower behind shows its lag by these.
  options.saw_tip = [this](std::uint64_t tip) { role_.counters().saw_tip(tip); };
  follower_ = std::make_unique<LogFollower>(
      etcd_, keys_, state_.seq(), [this](const LogEntry& entry) { return apply(entry); },
      [this](EtcdError why) {
        {
          std::lock_guard lock(mutex_);
          ended_ = std::move(why);
        }
        wake_.notify_all();
      },
      std::move(options));
}

bool Member::catch_up_from_snapshot() {
  follower_.reset();
  auto bytes = fetch_leader_snapshot(etcd_, keys_, store_->options().dir, options_.snapshot_fetch);
  if (!bytes) {
    log("no snapshot from the leader yet: " + bytes.error().message);
    return false;
  }
  auto installed = store_->install_snapshot(bytes.value().bytes());
  if (!installed) {
    log("the leader's snapshot cannot be installed: " + installed.error().message);
    return false;
  }
  if (answers_ && !installed.value().empty()) answers_(installed.value());
  role_.counters().snapshot_fetches.fetch_add(1, std::memory_order_relaxed);
  role_.counters().saw_tip(state_.seq());
  log("installed the leader's snapshot of change " + std::to_string(state_.seq()) + " while running");
  start_following();
  return true;
}

EtcdResult<void> Member::apply(const LogEntry& entry) {
  applied_.seq = state_.seq();
  auto applied = apply_entry(state_, entry, applied_, /*to_sink=*/true);
  if (applied) applied = store_->journal().write_through(state_.seq());
  if (!applied) return EtcdError{EtcdError::Kind::not_applied, 0, applied.error().message};
  role_.counters().saw_tip(entry.last_seq);
  role_.log_applied();
  if (!applied_.dedup.empty()) {
    if (answers_) answers_(applied_.dedup);
    applied_.dedup.clear();
  }
  return boost::outcome_v2::success();
}

}  // namespace hf3fs_meta::server::ha
