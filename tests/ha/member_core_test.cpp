// MemberCore (ha/member_core.hpp) driven as tables: each step a time, what the runner observed and
// reported, and the action the core must hand out. No etcd, no threads, no clock but the tests'.
#include "ha/member_core.hpp"

#include <chrono>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace hf3fs_meta::server::ha {
namespace {

using namespace std::chrono_literals;
using Kind = MemberAction::Kind;
using Time = MemberCore::Time;

constexpr MemberTiming kTiming{200ms, 5000ms, 1000ms};
const Time kStart = Time{} + 1h;

// The runner's side: the time, what it sees, and the core.
class MemberCoreTest : public ::testing::Test {
 protected:
  MemberAction next() { return core_.next(now_, facts_); }
  Kind kind() { return next().kind; }
  // The actions of one whole pass (up to the wait that ends it), with every report a quiet one
  // (renewed and alive, the key held, a campaign lost, a fetch failed), unless told otherwise.
  std::vector<Kind> pass(CampaignOutcome::Kind campaign = CampaignOutcome::Kind::lost,
                         RenewOutcome renewal = RenewOutcome{}) {
    std::vector<Kind> out;
    for (int i = 0; i < 20; ++i) {
      const MemberAction action = next();
      out.push_back(action.kind);
      switch (action.kind) {
        case Kind::wait: last_wait_ = action.until; return out;
        case Kind::stop: return out;
        case Kind::renew: core_.renewed(renewal); break;
        case Kind::check_leader_key: core_.key_checked(true); break;
        case Kind::campaign: core_.campaigned(CampaignOutcome{campaign}); break;
        case Kind::fetch_snapshot: core_.fetched(false, now_); break;
        default: break;
      }
    }
    ADD_FAILURE() << "a pass that never waits";
    return out;
  }
  // Started and leading: the first pass won.
  void lead() {
    ASSERT_EQ(next().why, "starting");
    ASSERT_THAT(pass(CampaignOutcome::Kind::led),
                ::testing::ElementsAre(Kind::renew, Kind::campaign, Kind::publish_applied, Kind::wait));
    ASSERT_TRUE(core_.leading());
  }

  Time now_ = kStart;
  MemberFacts facts_{true, true, 1000ms};
  MemberCore core_{kTiming, kStart};
  Time last_wait_{};
};

using ::testing::ElementsAre;

TEST_F(MemberCoreTest, StartsFollowingThenRenewsCampaignsAndPublishesEachPoll) {
  const MemberAction first = next();
  EXPECT_EQ(first.kind, Kind::stand_down);
  EXPECT_EQ(first.why, "starting");
  // The first renewal is due at once; a campaign lost; the applied seq published; a poll's wait.
  EXPECT_THAT(pass(), ElementsAre(Kind::renew, Kind::campaign, Kind::publish_applied, Kind::wait));
  EXPECT_EQ(last_wait_, kStart + 200ms);
  // Asked early, it waits on; at the time, a standby campaigns and publishes, renewing only when due.
  now_ = kStart + 100ms;
  EXPECT_EQ(kind(), Kind::wait);
  now_ = kStart + 200ms;
  EXPECT_THAT(pass(), ElementsAre(Kind::campaign, Kind::publish_applied, Kind::wait));
  now_ = kStart + 1000ms;
  EXPECT_THAT(pass(), ElementsAre(Kind::renew, Kind::campaign, Kind::publish_applied, Kind::wait));
  EXPECT_FALSE(core_.leading());
}

TEST_F(MemberCoreTest, ALeaderWakesEachPollForItsDiskAndPublishesOnlyAtRenewals) {
  lead();
  now_ = kStart + 200ms;
  EXPECT_THAT(pass(), ElementsAre(Kind::wait));
  // At a renewal: the lease renewed, the key checked, the applied seq published.
  now_ = kStart + 1000ms;
  EXPECT_THAT(pass(), ElementsAre(Kind::renew, Kind::check_leader_key, Kind::publish_applied, Kind::wait));
  EXPECT_TRUE(core_.leading());
}

TEST_F(MemberCoreTest, ALeaderCompactsTheLogEveryIntervalAndAStandbyNever) {
  lead();
  now_ = kStart + 4800ms;
  EXPECT_THAT(pass(), ElementsAre(Kind::renew, Kind::check_leader_key, Kind::publish_applied, Kind::wait));
  now_ = kStart + 5000ms;
  EXPECT_THAT(pass(), ElementsAre(Kind::compact, Kind::wait));
  now_ = kStart + 9800ms;
  EXPECT_THAT(pass(), ElementsAre(Kind::renew, Kind::check_leader_key, Kind::publish_applied, Kind::wait));
  now_ = kStart + 10000ms;
  EXPECT_THAT(pass(), ElementsAre(Kind::compact, Kind::wait));

  MemberCore standby(kTiming, kStart);
  Time at = kStart;
  for (int i = 0; i < 100; ++i, at += 200ms) {
    for (MemberAction a = standby.next(at, facts_); a.kind != Kind::wait; a = standby.next(at, facts_)) {
      ASSERT_NE(a.kind, Kind::compact);
      if (a.kind == Kind::campaign) standby.campaigned(CampaignOutcome{CampaignOutcome::Kind::lost});
      if (a.kind == Kind::renew) standby.renewed(RenewOutcome{});
    }
  }
}

TEST_F(MemberCoreTest, ALostAppendStandsTheLeaderDownAtOnceAndItCampaignsAgainAtTheNextPoll) {
  lead();
  now_ = kStart + 50ms;  // within the poll's wait: the event ends it
  core_.append_lost("the replicated log did not take it (fenced): not applied");
  const MemberAction down = next();
  EXPECT_EQ(down.kind, Kind::stand_down);
  EXPECT_EQ(down.why, "the replicated log did not take it (fenced): not applied");
  EXPECT_FALSE(core_.leading());
  // The pass ended there; the next one, a poll later, campaigns.
  EXPECT_EQ(kind(), Kind::wait);
  now_ = kStart + 250ms;
  EXPECT_THAT(pass(), ElementsAre(Kind::campaign, Kind::publish_applied, Kind::wait));
}

struct RenewalCase {
  const char* name;
  RenewOutcome outcome;
  bool surely_alive;  // after the renewal
  bool stands_down;
  const char* why;
};

class MemberCoreRenewalTest : public MemberCoreTest, public ::testing::WithParamInterface<RenewalCase> {};

// Whether a leader stands down at a renewal: the lease gone, or unanswered past where it is surely
// alive; an unanswered renewal within the lease keeps it leading (etcd may be electing a leader).
TEST_P(MemberCoreRenewalTest, ALeaderStandsDownOnlyWhenItsLeaseIsNotSurelyAlive) {
  const RenewalCase& c = GetParam();
  lead();
  now_ = kStart + 1000ms;
  EXPECT_EQ(kind(), Kind::renew);
  core_.renewed(c.outcome);
  facts_.lease_surely_alive = c.surely_alive;
  const MemberAction after = next();
  if (c.stands_down) {
    EXPECT_EQ(after.kind, Kind::stand_down);
    EXPECT_EQ(after.why, c.why);
    EXPECT_FALSE(core_.leading());
    EXPECT_EQ(kind(), Kind::wait);  // the pass ended
  } else {
    // Answered: the key is checked; unanswered: not (the lease decides), and the pass goes on.
    EXPECT_EQ(after.kind, c.outcome.answered ? Kind::check_leader_key : Kind::publish_applied);
    EXPECT_TRUE(core_.leading());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Renewals, MemberCoreRenewalTest,
    ::testing::Values(RenewalCase{"alive", RenewOutcome{true, true, ""}, true, false, ""},
                      RenewalCase{"gone", RenewOutcome{true, false, ""}, true, true, "the lease is gone"},
                      RenewalCase{"unanswered_within_the_lease", RenewOutcome{false, false, "timeout"}, true, false, ""},
                      RenewalCase{"unanswered_past_the_lease", RenewOutcome{false, false, "timeout"}, false, true,
                                  "the lease could not be renewed: timeout"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST_F(MemberCoreTest, ALeaderWhoseKeyIsGoneStandsDown) {
  lead();
  now_ = kStart + 1000ms;
  EXPECT_EQ(kind(), Kind::renew);
  core_.renewed(RenewOutcome{});
  EXPECT_EQ(kind(), Kind::check_leader_key);
  core_.key_checked(false);
  const MemberAction down = next();
  EXPECT_EQ(down.kind, Kind::stand_down);
  EXPECT_EQ(down.why, "the leader key is no longer this member's");
  EXPECT_FALSE(core_.leading());
}

// The wedge an audit found: the leader's disk fails. It steps down (settle, stand down, resign) at its next
// poll, and campaigns again only once its disk writes and a retry's time has passed, so that a
// healthy standby leads first.
TEST_F(MemberCoreTest, ALeaderWhoseDiskFailsStepsDownAndCampaignsOnlyOnceItWritesAgain) {
  lead();
  facts_.disk_writable = false;
  now_ = kStart + 200ms;
  EXPECT_THAT(pass(), ElementsAre(Kind::step_down_for_disk, Kind::wait));
  EXPECT_FALSE(core_.leading());
  // Not writable: no campaign.
  now_ = kStart + 400ms;
  EXPECT_THAT(pass(), ElementsAre(Kind::publish_applied, Kind::wait));
  // Writable again, but within the retry's time after the step down: still none.
  facts_.disk_writable = true;
  now_ = kStart + 600ms;
  EXPECT_THAT(pass(), ElementsAre(Kind::publish_applied, Kind::wait));
  now_ = kStart + 1200ms;
  EXPECT_THAT(pass(), ElementsAre(Kind::renew, Kind::campaign, Kind::publish_applied, Kind::wait));
}

struct DiskCase {
  const char* name;
  const char* disk_error;  // MemberFacts::disk_error
  const char* why;         // the step down's
};

class MemberCoreDiskTest : public MemberCoreTest, public ::testing::WithParamInterface<DiskCase> {};

// The step down for the disk says why: the journal's error when the runner has one, and that a write
// failed when it has none.
TEST_P(MemberCoreDiskTest, ALeaderStepsDownForItsDiskSayingWhy) {
  const DiskCase& c = GetParam();
  lead();
  facts_.disk_writable = false;
  facts_.disk_error = c.disk_error;
  now_ = kStart + 200ms;
  const MemberAction down = next();
  EXPECT_EQ(down.kind, Kind::step_down_for_disk);
  EXPECT_EQ(down.why, c.why);
  EXPECT_FALSE(core_.leading());
}

INSTANTIATE_TEST_SUITE_P(
    Disks, MemberCoreDiskTest,
    ::testing::Values(DiskCase{"the_journals_error", "journal.log: write: No space left on device",
                               "the data dir failed (journal.log: write: No space left on device): a member "
                               "whose disk works leads"},
                      DiskCase{"no_error_given", "",
                               "the data dir failed (a write failed): a member whose disk works leads"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST_F(MemberCoreTest, AMemberBehindTheCompactedLogFetchesASnapshotEachRetryAndCampaignsOnlyOnceInstalled) {
  ASSERT_EQ(next().why, "starting");
  ASSERT_THAT(pass(), ElementsAre(Kind::renew, Kind::campaign, Kind::publish_applied, Kind::wait));
  core_.following_ended(/*needs_snapshot=*/true);
  now_ = kStart + 10ms;  // the event ends the wait
  EXPECT_THAT(pass(), ElementsAre(Kind::fetch_snapshot, Kind::publish_applied, Kind::wait));  // failed
  EXPECT_TRUE(core_.behind());
  now_ = kStart + 210ms;  // a poll later: no fetch yet, no campaign
  EXPECT_THAT(pass(), ElementsAre(Kind::publish_applied, Kind::wait));
  now_ = kStart + 1010ms;
  EXPECT_EQ(kind(), Kind::fetch_snapshot);
  core_.fetched(true, now_);
  EXPECT_FALSE(core_.behind());
  EXPECT_EQ(kind(), Kind::renew);
  core_.renewed(RenewOutcome{});
  EXPECT_EQ(kind(), Kind::campaign);
}

// Following ended on an entry this member cannot apply: it follows again a retry later (the entry
// would fail again at once), whatever events come meanwhile, and the pass then goes on.
TEST_F(MemberCoreTest, FollowingThatEndedOnAnEntryStartsAgainARetryLater) {
  ASSERT_EQ(next().why, "starting");
  ASSERT_THAT(pass(), ElementsAre(Kind::renew, Kind::campaign, Kind::publish_applied, Kind::wait));
  core_.following_ended(/*needs_snapshot=*/false);
  now_ = kStart + 10ms;
  const MemberAction wait = next();
  EXPECT_EQ(wait.kind, Kind::wait);
  EXPECT_EQ(wait.until, kStart + 1010ms);
  now_ = kStart + 500ms;
  EXPECT_EQ(next().until, kStart + 1010ms);
  now_ = kStart + 1010ms;
  const MemberAction again = next();
  EXPECT_EQ(again.kind, Kind::stand_down);
  EXPECT_EQ(again.why, "following again");
  EXPECT_FALSE(core_.behind());
  EXPECT_THAT(pass(), ElementsAre(Kind::renew, Kind::campaign, Kind::publish_applied, Kind::wait));
}

// Won, but the catch-up or the renewal failed: it resigns, follows, and leaves the next campaigns
// to the others for a retry's time.
TEST_F(MemberCoreTest, AWonElectionThatCannotLeadResignsAndWaitsBeforeCampaigningAgain) {
  ASSERT_EQ(next().why, "starting");
  EXPECT_THAT(pass(CampaignOutcome::Kind::cannot_lead),
              ElementsAre(Kind::renew, Kind::campaign, Kind::resign, Kind::stand_down, Kind::publish_applied,
                          Kind::wait));
  EXPECT_FALSE(core_.leading());
  now_ = kStart + 200ms;
  EXPECT_THAT(pass(), ElementsAre(Kind::publish_applied, Kind::wait));
  now_ = kStart + 1000ms;
  EXPECT_THAT(pass(), ElementsAre(Kind::renew, Kind::campaign, Kind::publish_applied, Kind::wait));
}

TEST_F(MemberCoreTest, AnUnansweredCampaignLeavesItFollowingAndCampaigningEachPoll) {
  ASSERT_EQ(next().why, "starting");
  EXPECT_THAT(pass(CampaignOutcome::Kind::unanswered),
              ElementsAre(Kind::renew, Kind::campaign, Kind::publish_applied, Kind::wait));
  now_ = kStart + 200ms;
  EXPECT_THAT(pass(CampaignOutcome::Kind::unanswered), ElementsAre(Kind::campaign, Kind::publish_applied, Kind::wait));
  EXPECT_FALSE(core_.leading());
}

TEST_F(MemberCoreTest, StopEndsEverythingAtOnce) {
  lead();
  core_.stop();
  EXPECT_EQ(kind(), Kind::stop);
  now_ = kStart + 10s;
  EXPECT_EQ(kind(), Kind::stop);
}

}  // namespace
}  // namespace hf3fs_meta::server::ha
