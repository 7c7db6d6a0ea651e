// ha::Member: one server of an HA cluster (--ha-etcd). It campaigns for the leader key; the winner
// catches up with the replicated log, then its journal appends to the log (the Store's replicate
// hook, Journal::Options::replicate) and it answers; the others follow the log into their state and
// answer 503 "not the leader" (the Router asks Role).
//
// What to do and when is MemberCore's (member_core.hpp: the decisions, without I/O); Member runs
// them on a thread of its own: the etcd calls, the store, following the log, and the outcomes
// reported back.
//
// One Store for the member's life, whatever its role: a standby's records enter its state from the
// log and go to its journal as the leader wrote them (apply_entry with to_sink), so its data dir and
// snapshots are those of the leader at the same seq, and a promotion starts its journal where the
// log ends. What replicate() does with a batch depends on where its records came from, which the
// mode says; every mode change waits until the journal has nothing pending, so that no batch holds
// records of two modes:
//   following  records from the log: already there, acknowledged as they come
//   leading    records of the leader's answers: appended to the log, acknowledged once it has them
//   closed     records of a leader that stepped down: refused (the journal rolls them back)
//
// Stepping down (a lease that lapsed, a failed or fenced append, an append whose outcome no etcd
// member could tell within the etcd timeout, a local journal write or sync that failed: then it
// also resigns, and campaigns only once its data dir writes again):
// the Router stops answering at once; every change admitted meanwhile is refused or waited for
// (Store::barrier); what the log did not take is rolled back (Store::settle) and the member
// follows the log from there, which brings back a lost-answer batch if etcd did take it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "durable/record.hpp"
#include "durable/store.hpp"
#include "ha/election.hpp"
#include "ha/etcd_client.hpp"
#include "ha/follower.hpp"
#include "ha/keys.hpp"
#include "ha/log.hpp"
#include "ha/member_core.hpp"
#include "ha/role.hpp"
#include "ha/snapshot_fetch.hpp"
#include "hf3fs_meta/state.hpp"

namespace hf3fs_meta::server::ha {

struct MemberOptions {
  std::vector<std::string> etcd;  // client URLs
  std::string cluster;            // keys under /hf3fs-meta/<cluster>/
  std::string name;               // this member's, unique in the cluster
  std::string advertise;          // how clients reach this member (or given to start())
  std::int64_t ttl_seconds = 3;   // the lease
  // How often a member that does not lead asks who does (a campaign): a failover takes the lease
  // plus up to this, plus the new leader's catching up.
  std::chrono::milliseconds poll{200};
  // A call to etcd, across its members (EtcdOptions::call_timeout), and so an append whose answer
  // was lost before the leader steps down: etcd's own leader election (about 1-2 s on loopback with
  // its defaults) must fit in it, or an etcd failover deposes ours needlessly.
  std::chrono::milliseconds etcd_timeout{3000};
  // One etcd member's time to answer before a call moves on to the next (EtcdOptions::
  // request_timeout): what a stopped etcd member costs the leader's writes.
  std::chrono::milliseconds etcd_attempt_timeout{1000};
  // How often the leader deletes the log entries every live member has applied and its own last
  // snapshot holds, and compacts etcd's history (etcd 3.4 keeps every old revision unless asked).
  std::chrono::milliseconds compact_interval{5000};
  // How a member behind the compacted log gets the leader's snapshot, at start and while it runs.
  SnapshotFetchOptions snapshot_fetch{};
};

class Member {
 public:
  // The request-id answers of the entries applied (for the Router's dedup cache).
  using Answers = std::function<void(std::vector<durable::DedupEntry>& answers)>;

  Member(MemberOptions options, MetadataState& state);
  ~Member();  // stop()
  Member(const Member&) = delete;
  Member& operator=(const Member&) = delete;

  // Store::Options::replicate of the member's store (see the top).
  durable::Result<void> replicate(std::string_view records, std::uint64_t last_seq);

  // Starts following the log, then campaigning, on a thread of its own. `store` was opened on
  // `state` with replicate() after cut_journal_after_snapshot (a member trusts its data dir only up to
  // its snapshot); both outlive the member's stop().
  void start(durable::Store& store, Answers answers, std::string advertise);
  // Before the store opens: the leader's snapshot into `dir` if the log no longer continues it
  // (snapshot_fetch.hpp). The seq installed; 0 when none was needed.
  EtcdResult<std::uint64_t> fetch_snapshot_if_behind(const std::filesystem::path& dir);
  // Stops leading (the lease revoked: another member takes over at once) and following. What was
  // acknowledged is in the log; the store may then take its shutdown snapshot.
  void stop();

  const Role& role() const noexcept { return role_; }
  const MemberOptions& options() const noexcept { return options_; }

 private:
  enum class Mode : std::uint8_t { closed, following, leading };

  // The member's thread: asks the core (member_core.hpp) what to do, does it, reports the outcome.
  void run();
  // What the core decides on. A journal failure during this term counts as a disk that does not
  // write, even once the journal writes again: the change that met it is rolled back at once, which
  // clears the journal's failure, and a leader that looked only then would keep its lease however
  // full its disk.
  MemberFacts facts() const;
  // Hands the core what the other threads reported (stop, a lost append, following that ended).
  void take_events(MemberCore& core);
  // Until `until`, or an event.
  void wait_for_event(std::chrono::steady_clock::time_point until);
  RenewOutcome renew();
  // A campaign; catches up and leads if it won.
  CampaignOutcome campaign();
  std::chrono::milliseconds renewal_interval() const;  // a third of the lease etcd granted
  // As leader: whether the leader key is still the one this member created (false only when etcd
  // says it is not).
  bool holds_leader_key();
  // Catches up with the log under `fence`, then leads. An error: it does not lead.
  EtcdResult<void> lead(std::int64_t fence);
  // Leading ends (or never began, at start): mode closed, what the log did not take rolled back,
  // then following from there.
  void stand_down(const std::string& why);
  // The leader's local journal failed (a full disk, say): it stands down and resigns so that a
  // healthy standby leads at once; the core has it campaign again only once its data dir writes
  // again (a snapshot cleared the failure; the log then brings what it missed). `why`: the core's
  // words for it, with the journal's error.
  void step_down_for_disk(const std::string& why);
  // stand_down's and stop()'s first half: no more answers, no more following, what the log did not
  // take rolled back. Whether the member led.
  bool stop_answering();
  // Waits until every record appended so far is acknowledged or refused, then sets the mode.
  void switch_mode(Mode mode);
  void start_following();
  // Behind the compacted log while running: one attempt at the leader's snapshot, installed into
  // the store, then following from it. Whether it worked (if not, the core has it try again a second later).
  bool catch_up_from_snapshot();
  EtcdResult<void> apply(const LogEntry& entry);
  // Puts this member's applied seq under its lease (members/<name>), when it changed.
  void publish_applied();
  // As leader: drops the entries below what every live member applied and the last snapshot holds.
  EtcdResult<void> compact();
  void log(const std::string& line) const;

  MemberOptions options_;
  MetadataState& state_;
  Keys keys_;
  EtcdClient etcd_;
  Election election_;
  Role role_;
  durable::Store* store_ = nullptr;
  Answers answers_;
  durable::Recovered applied_;  // apply_entry's accumulator (apply() sets its seq to the state's)

  // The mode and the writer. Appends run without it (several at once); a mode change waits until
  // none is in flight (appends_ended_), so that each is answered under the mode it began in.
  mutable std::mutex mode_mutex_;
  std::condition_variable appends_ended_;
  std::size_t appends_in_flight_ = 0;
  Mode mode_ = Mode::closed;
  std::optional<LogWriter> writer_;  // while leading
  // Sets mode_ once no append is in flight (mode_mutex_ held by `lock`).
  void set_mode_locked(std::unique_lock<std::mutex>& lock, Mode mode);
  std::int64_t fence_ = 0;           // the leader key's create revision, once leading
  std::uint64_t disk_errors_at_lead_ = 0;  // the journal's disk_errors when this term began

  std::unique_ptr<LogFollower> follower_;  // while following; the member's thread only
  std::uint64_t published_ = 0;           // the applied seq last put under members/<name>
  std::int64_t published_lease_ = 0;      // the lease it was put under
  std::uint64_t compacted_ = 0;           // entries up to this record are gone from the log

  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;          // under mutex_
  std::string lost_;               // under mutex_: why leading must end (a failed append)
  std::optional<EtcdError> ended_;  // under mutex_: why following ended
  std::thread thread_;
};

}  // namespace hf3fs_meta::server::ha
