#include "ha/member.hpp"

#include <cstdio>
#include <future>
#include <utility>

#include "ha/apply.hpp"

namespace hf3fs_meta::server::ha {
namespace {

EtcdOptions etcd_options(const MemberOptions& options) {
  EtcdOptions out;
  out.endpoints = options.etcd;
  out.request_timeout = options.etcd_timeout;
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
  std::lock_guard lock(mode_mutex_);
  switch (mode_) {
    case Mode::following:
      return boost::outcome_v2::success();
    case Mode::closed:
      return durable::Error{durable::Errc::journal_failed, "this member is no longer the leader: not applied"};
    case Mode::leading:
      break;
  }
  auto appended = writer_->append(records, last_seq);
  if (appended) return boost::outcome_v2::success();
  // Nothing more is acknowledged as leader: the Router stops answering now, the member's thread
  // stands down.
  role_.demote();
  mode_ = Mode::closed;
  const EtcdError& error = appended.error();
  const std::string why =
      error.kind == EtcdError::Kind::unknown
          ? "the replicated log did not answer (" + error.message +
                "): the outcome is unknown, the change may yet be applied; repeat it with the same X-Request-Id"
          : "the replicated log did not take it (" + error.message + "): not applied";
  {
    std::lock_guard wake(mutex_);
    lost_ = why;
  }
  wake_.notify_all();
  return durable::Error{durable::Errc::journal_failed, why};
}

void Member::start(durable::Store& store, Answers answers, std::string advertise) {
  options_.advertise = std::move(advertise);
  election_.set_advertise(options_.advertise);
  store_ = &store;
  answers_ = std::move(answers);
  applied_.seq = state_.seq();
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
  follower_.reset();
  if (!store_) return;
  const bool led = role_.name() == RoleName::leader;
  role_.demote();
  switch_mode(Mode::closed);
  if (auto settled_store = store_->settle(); !settled_store) log("rolling back at stop: " + settled_store.error().message);
  if (led) election_.resign();  // the leader key goes now, not a lease later
}

void Member::switch_mode(Mode mode) {
  // Every change admitted under the old mode has its record appended once the gate is free.
  store_->barrier();
  const std::uint64_t last = state_.seq();
  if (mode == Mode::closed) {
    std::lock_guard lock(mode_mutex_);  // an append in flight finishes first
    mode_ = mode;
    writer_.reset();
  }
  // Acknowledged or refused, each under the mode it was written in.
  (void)store_->journal().write_through(last);
  (void)settled(store_->journal(), last);
  std::lock_guard lock(mode_mutex_);
  mode_ = mode;
  if (mode != Mode::leading) writer_.reset();
}

void Member::run() {
  stand_down("starting");
  auto next_renewal = std::chrono::steady_clock::now();
  for (;;) {
    std::string lost;
    std::optional<EtcdError> ended;
    {
      std::unique_lock lock(mutex_);
      const auto until = role_.name() == RoleName::leader ? next_renewal
                                                          : std::min(next_renewal, std::chrono::steady_clock::now() + options_.poll);
      wake_.wait_until(lock, until, [&] { return stopping_ || !lost_.empty() || ended_; });
      if (stopping_) return;
      std::swap(lost, lost_);
      std::swap(ended, ended_);
    }
    if (!lost.empty()) {
      stand_down(lost);
      continue;
    }
    if (ended) {
      log("following the log ended: " + ended->message);
      stand_down("following again");
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_renewal) {
      next_renewal = now + std::chrono::milliseconds(election_.ttl_seconds() * 1000 / 3);
      auto renewed = election_.renew();
      if (role_.name() == RoleName::leader && (!renewed ? !election_.surely_alive() : !renewed.value())) {
        stand_down(renewed ? std::string("the lease is gone") : "the lease could not be renewed: " + renewed.error().message);
        continue;
      }
    }
    if (role_.name() != RoleName::leader && campaign()) {
      next_renewal = std::chrono::steady_clock::now() + std::chrono::milliseconds(election_.ttl_seconds() * 1000 / 3);
    }
  }
}

bool Member::campaign() {
  auto outcome = election_.campaign();
  if (!outcome) {
    if (role_.name() != RoleName::candidate) log("etcd does not say who leads: " + outcome.error().message);
    role_.set(RoleName::candidate, {});
    return false;
  }
  if (!outcome.value().won) {
    role_.set(outcome.value().leader.empty() ? RoleName::candidate : RoleName::standby, outcome.value().leader);
    return true;
  }
  if (auto led = lead(outcome.value().fence); !led) {
    log("won the election but cannot lead: " + led.error().message);
    election_.resign();
    stand_down("resigned");
  }
  return true;
}

EtcdResult<void> Member::lead(std::int64_t fence) {
  follower_.reset();
  auto tip = read_tip(etcd_, keys_);
  if (!tip) return tip.error();
  while (state_.seq() < tip.value().seq) {
    auto read = read_log(etcd_, keys_, state_.seq());
    if (!read) return read.error();
    for (const LogEntry& entry : read.value().entries) {
      if (auto applied = apply(entry); !applied) return applied;
    }
  }
  if (state_.seq() != tip.value().seq) {
    return EtcdError{EtcdError::Kind::not_applied, 0,
                     "this member's data dir holds change " + std::to_string(state_.seq()) +
                         ", past the log's tip " + std::to_string(tip.value().seq) +
                         ": it was not written by this cluster"};
  }
  switch_mode(Mode::following);  // the log's records acknowledged
  {
    std::lock_guard lock(mode_mutex_);
    writer_.emplace(etcd_, keys_, fence, tip.value());
    mode_ = Mode::leading;
  }
  // Leases and recency were not replicated: every key counts as read-leased for one lease period,
  // as after a restart (the records it makes, if any, go to the log).
  state_.restarted();
  (void)store_->journal().write_through(state_.seq());
  role_.set(RoleName::leader, options_.advertise);
  log("leads from change " + std::to_string(state_.seq()) + " (fence " + std::to_string(fence) + ")");
  return boost::outcome_v2::success();
}

void Member::stand_down(const std::string& why) {
  const bool led = role_.name() == RoleName::leader;
  role_.demote();
  follower_.reset();
  switch_mode(Mode::closed);
  // What the log did not take is rolled back: the state is then the log's up to some seq.
  if (auto settled_store = store_->settle(); !settled_store) log("rolling back: " + settled_store.error().message);
  // A failed journal writes again once a snapshot is taken (of changes the log has).
  if (!store_->journal().writable()) (void)store_->snapshot();
  switch_mode(Mode::following);
  if (led) log("stepped down: " + why);
  start_following();
}

void Member::start_following() {
  applied_.seq = state_.seq();
  follower_ = std::make_unique<LogFollower>(
      etcd_, keys_, state_.seq(), [this](const LogEntry& entry) { return apply(entry); },
      [this](EtcdError why) {
        {
          std::lock_guard lock(mutex_);
          ended_ = std::move(why);
        }
        wake_.notify_all();
      });
}

EtcdResult<void> Member::apply(const LogEntry& entry) {
  applied_.seq = state_.seq();
  auto applied = apply_entry(state_, entry, applied_, /*to_sink=*/true);
  if (applied) applied = store_->journal().write_through(state_.seq());
  if (!applied) return EtcdError{EtcdError::Kind::not_applied, 0, applied.error().message};
  if (!applied_.dedup.empty()) {
    if (answers_) answers_(applied_.dedup);
    applied_.dedup.clear();
  }
  return boost::outcome_v2::success();
}

}  // namespace hf3fs_meta::server::ha
