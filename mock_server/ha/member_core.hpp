// MemberCore: what an HA member decides, apart from what it does. etcd's raft package is the
// model (RawNode takes ticks and messages and hands back what to do; its caller does the I/O): the
// core holds what the member knows of its role, its timers and what its other threads reported;
// Member (member.hpp), the runner, asks next() what to do now, does it (etcd's calls, the disk,
// following the log) and reports what came of it. The core reads no clock, blocks on nothing and
// calls nothing, so that every role transition is tested as a table, without etcd
// (member_core_test.cpp).
//
// One pass, each time the member wakes (a poll, a renewal due, an event), in this order:
//   1. an append the log did not take: stand down;
//   2. leading on a data dir that fails: step down for the disk (resign; no campaign for a while);
//   3. following that ended: behind the compacted log, fetch the leader's snapshot; any other end,
//      follow again a while later (an entry that cannot be applied fails again at once);
//   4. a snapshot fetch due while behind;
//   5. a renewal due (every member renews its lease, whatever its role): a leader whose lease is
//      gone, or not surely alive after a failed renewal, or whose leader key is no longer its own,
//      stands down;
//   6. a campaign, when not leading, not behind, the disk writes and no earlier failure said wait;
//   7. the applied seq published (a leader's only at its renewals: an etcd write per poll would
//      cost its appends);
//   8. as leader, a compaction of the log when due.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>

namespace hf3fs_meta::server::ha {

struct MemberTiming {
  // How often a member that does not lead campaigns (and a leader looks at its data dir).
  std::chrono::milliseconds poll{200};
  // How often the leader compacts the log.
  std::chrono::milliseconds compact_interval{5000};
  // After a won election that could not lead, a disk failure, a snapshot fetch that failed or an
  // entry that could not be applied: what failed may fail again at once, so not before this.
  std::chrono::milliseconds retry{1000};
};

struct MemberAction {
  enum class Kind : std::uint8_t {
    wait,                // nothing to do until `until`, or until an event is reported
    stop,                // the member is stopping: the runner returns
    stand_down,          // stop answering, roll back what the log did not take, follow it from there
    step_down_for_disk,  // the leader's data dir failed: settle with the log, stand down, resign
    resign,              // revoke the lease (after a won election that could not lead)
    fetch_snapshot,      // behind the compacted log: install the leader's snapshot: fetched()
    renew,               // one renewal of the lease: renewed()
    check_leader_key,    // as leader: whether the leader key is still this member's: key_checked()
    campaign,            // campaign, and catch up and lead if it won: campaigned()
    publish_applied,     // put the applied seq under the lease (when it changed)
    compact,             // as leader: drop the log's entries every member has
  };
  Kind kind = Kind::wait;
  std::chrono::steady_clock::time_point until{};  // wait
  std::string why;                                // stand_down, step_down_for_disk
};

// What the runner sees when it asks: read afresh for each next().
struct MemberFacts {
  bool disk_writable = true;         // the local journal writes (Journal::writable)
  bool lease_surely_alive = false;   // Election::surely_alive
  std::chrono::milliseconds renewal_interval{1000};  // a third of the TTL etcd granted
  std::string disk_error{};          // when it does not: Journal::writable's why (may be empty)
};

struct RenewOutcome {
  bool answered = true;  // etcd answered the renewal
  bool alive = true;     // ... that the lease lives (false: it is gone)
  std::string error;     // when it did not answer
};

struct CampaignOutcome {
  enum class Kind : std::uint8_t {
    unanswered,   // etcd did not say who leads
    lost,         // another member leads (or nobody, and this one did not win)
    led,          // won, caught up with the log, and leads
    cannot_lead,  // won, but could not catch up or renew: it must resign
  };
  Kind kind = Kind::lost;
};

class MemberCore {
 public:
  using Kind = MemberAction::Kind;
  using Time = std::chrono::steady_clock::time_point;

  MemberCore(MemberTiming timing, Time now);

  // Events from the member's other threads, handed in by the runner's thread.
  void append_lost(std::string why);      // the log did not take an append (or its answer was lost)
  void following_ended(bool needs_snapshot);  // following the log ended for good
  void stop() { stopping_ = true; }

  // What to do at `now`. After each action but wait and stop, the runner does it and reports its
  // outcome where the action names a report, then asks again.
  MemberAction next(Time now, const MemberFacts& facts);

  void renewed(RenewOutcome outcome) { renewal_ = std::move(outcome); }
  void key_checked(bool holds) { key_held_ = holds; }
  void campaigned(CampaignOutcome outcome) { campaign_ = outcome.kind; }
  void fetched(bool installed, Time now);

  bool leading() const noexcept { return leading_; }
  bool behind() const noexcept { return behind_; }

 private:
  // A step of the pass (the order at the top): an action to hand out, or none (on to the next step).
  using Step = std::optional<MemberAction> (MemberCore::*)(Time now, const MemberFacts& facts);
  static const Step kSteps[];

  std::optional<MemberAction> on_lost(Time now, const MemberFacts& facts);
  std::optional<MemberAction> on_disk(Time now, const MemberFacts& facts);
  std::optional<MemberAction> on_ended(Time now, const MemberFacts& facts);
  std::optional<MemberAction> on_refollow(Time now, const MemberFacts& facts);
  std::optional<MemberAction> on_fetch(Time now, const MemberFacts& facts);
  std::optional<MemberAction> on_renew(Time now, const MemberFacts& facts);
  std::optional<MemberAction> on_renewed(Time now, const MemberFacts& facts);
  std::optional<MemberAction> on_key(Time now, const MemberFacts& facts);
  std::optional<MemberAction> on_campaign(Time now, const MemberFacts& facts);
  std::optional<MemberAction> on_campaigned(Time now, const MemberFacts& facts);
  std::optional<MemberAction> on_resigned(Time now, const MemberFacts& facts);
  std::optional<MemberAction> on_publish(Time now, const MemberFacts& facts);
  std::optional<MemberAction> on_compact(Time now, const MemberFacts& facts);

  // The action, after which the pass goes on with the next step (`then`) or ends.
  enum class Then : std::uint8_t { next_step, end_pass };
  MemberAction act(Kind kind, Then then, std::string why = {});
  MemberAction stand_down(std::string why, Then then);

  MemberTiming timing_;
  bool started_ = false;     // the first action (following from the data dir) was handed out
  bool in_pass_ = false;     // false between passes: waiting until wait_until_ or an event
  std::size_t step_ = 0;     // in a pass: the step to resume at
  // Between passes: the next one's time, set at the first call after a pass ended (its last action
  // takes time: the wait starts when it is done).
  std::optional<Time> wait_until_;
  bool stopping_ = false;
  bool leading_ = false;
  bool behind_ = false;                 // the log was compacted past this member's state
  std::string lost_;                    // why an append was lost; empty: none
  std::optional<bool> ended_;           // following ended: whether it needs a snapshot
  std::optional<Time> refollow_at_;     // after following ended on an entry: follow again then
  bool renewal_due_ = false;            // in this pass
  bool resigning_ = false;              // a won election that could not lead: resigned, then stand down
  // Outcomes reported, each read (and cleared) by the step after the action that asked for it.
  std::optional<RenewOutcome> renewal_;
  std::optional<bool> key_held_;
  std::optional<CampaignOutcome::Kind> campaign_;
  Time next_renewal_;
  Time next_compaction_;
  Time next_fetch_;
  Time campaign_after_{};
};

}  // namespace hf3fs_meta::server::ha
