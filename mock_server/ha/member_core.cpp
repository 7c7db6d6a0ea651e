#include "ha/member_core.hpp"

#include <algorithm>

namespace hf3fs_meta::server::ha {

const MemberCore::Step MemberCore::kSteps[] = {
    &MemberCore::on_lost,     &MemberCore::on_disk,    &MemberCore::on_ended,      &MemberCore::on_refollow,
    &MemberCore::on_fetch,    &MemberCore::on_renew,   &MemberCore::on_renewed,    &MemberCore::on_key,
    &MemberCore::on_campaign, &MemberCore::on_campaigned, &MemberCore::on_resigned, &MemberCore::on_publish,
    &MemberCore::on_compact,
};

MemberCore::MemberCore(MemberTiming timing, Time now)
    : timing_(timing), next_renewal_(now), next_compaction_(now + timing.compact_interval), next_fetch_(now) {}

void MemberCore::append_lost(std::string why) { lost_ = std::move(why); }

void MemberCore::following_ended(bool needs_snapshot) { ended_ = needs_snapshot; }

void MemberCore::fetched(bool installed, Time now) {
  behind_ = !installed;
  next_fetch_ = now + timing_.retry;
}

MemberAction MemberCore::act(Kind kind, Then then, std::string why) {
  if (then == Then::end_pass) in_pass_ = false;
  return MemberAction{kind, {}, std::move(why)};
}

MemberAction MemberCore::stand_down(std::string why, Then then) {
  leading_ = false;
  return act(Kind::stand_down, then, std::move(why));
}

MemberAction MemberCore::next(Time now, const MemberFacts& facts) {
  if (stopping_) return MemberAction{Kind::stop, {}, {}};
  if (!started_) {
    started_ = true;
    return stand_down("starting", Then::end_pass);  // following from what the data dir holds, first
  }
  if (!in_pass_) {
    if (!wait_until_) wait_until_ = std::min(next_renewal_, now + timing_.poll);
    if (lost_.empty() && !ended_ && now < *wait_until_) return MemberAction{Kind::wait, *wait_until_, {}};
    wait_until_.reset();
    in_pass_ = true;
    step_ = 0;
  }
  for (; step_ < std::size(kSteps); ++step_) {
    const std::size_t step = step_;
    if (auto action = (this->*kSteps[step])(now, facts)) {
      // The pass resumes after this step, unless the step asked to be asked again (a wait).
      if (in_pass_ && action->kind != Kind::wait) step_ = step + 1;
      return *action;
    }
  }
  in_pass_ = false;
  return next(now, facts);
}

std::optional<MemberAction> MemberCore::on_lost(Time, const MemberFacts&) {
  if (lost_.empty()) return std::nullopt;
  return stand_down(std::exchange(lost_, {}), Then::end_pass);
}

std::optional<MemberAction> MemberCore::on_disk(Time now, const MemberFacts& facts) {
  if (!leading_ || facts.disk_writable) return std::nullopt;
  leading_ = false;
  campaign_after_ = now + timing_.retry;  // the others campaign first
  const std::string failure = facts.disk_error.empty() ? std::string("a write failed") : facts.disk_error;
  return act(Kind::step_down_for_disk, Then::end_pass,
             "the data dir failed (" + failure + "): a member whose disk works leads");
}

std::optional<MemberAction> MemberCore::on_ended(Time now, const MemberFacts&) {
  if (!ended_) return std::nullopt;
  if (*std::exchange(ended_, std::nullopt)) {
    behind_ = true;
  } else {
    refollow_at_ = now + timing_.retry;  // an entry that cannot be applied fails again at once
  }
  return std::nullopt;
}

std::optional<MemberAction> MemberCore::on_refollow(Time now, const MemberFacts&) {
  if (!refollow_at_) return std::nullopt;
  if (now < *refollow_at_) return MemberAction{Kind::wait, *refollow_at_, {}};
  refollow_at_.reset();
  return stand_down("following again", Then::next_step);
}

std::optional<MemberAction> MemberCore::on_fetch(Time now, const MemberFacts&) {
  if (!behind_ || now < next_fetch_) return std::nullopt;
  return act(Kind::fetch_snapshot, Then::next_step);
}

std::optional<MemberAction> MemberCore::on_renew(Time now, const MemberFacts& facts) {
  // Every member renews, whatever its role: a standby's lease is the one it campaigns with.
  renewal_due_ = now >= next_renewal_;
  if (!renewal_due_) return std::nullopt;
  next_renewal_ = now + facts.renewal_interval;
  return act(Kind::renew, Then::next_step);
}

std::optional<MemberAction> MemberCore::on_renewed(Time, const MemberFacts& facts) {
  if (!renewal_) return std::nullopt;
  const RenewOutcome outcome = *std::exchange(renewal_, std::nullopt);
  if (!leading_) return std::nullopt;
  if (!outcome.answered && !facts.lease_surely_alive) {
    return stand_down("the lease could not be renewed: " + outcome.error, Then::end_pass);
  }
  if (outcome.answered && !outcome.alive) return stand_down("the lease is gone", Then::end_pass);
  // The key can go while the lease lives (deleted by hand): reads would go on, only a change would
  // be fenced. Checked at each renewal, which bounds such stale reads to one interval.
  if (outcome.answered) return act(Kind::check_leader_key, Then::next_step);
  return std::nullopt;
}

std::optional<MemberAction> MemberCore::on_key(Time, const MemberFacts&) {
  if (!key_held_ || *std::exchange(key_held_, std::nullopt)) return std::nullopt;
  return stand_down("the leader key is no longer this member's", Then::end_pass);
}

std::optional<MemberAction> MemberCore::on_campaign(Time now, const MemberFacts& facts) {
  // A member whose data dir fails does not campaign until a snapshot made it writable again.
  if (leading_ || behind_ || now < campaign_after_ || !facts.disk_writable) return std::nullopt;
  return act(Kind::campaign, Then::next_step);
}

std::optional<MemberAction> MemberCore::on_campaigned(Time now, const MemberFacts&) {
  if (!campaign_) return std::nullopt;
  const CampaignOutcome::Kind outcome = *std::exchange(campaign_, std::nullopt);
  leading_ = outcome == CampaignOutcome::Kind::led;
  if (outcome != CampaignOutcome::Kind::cannot_lead) return std::nullopt;
  // What failed (a data dir ahead of the log, etcd failing the catch-up) may fail again at once:
  // the others campaign meanwhile.
  campaign_after_ = now + timing_.retry;
  resigning_ = true;
  return act(Kind::resign, Then::next_step);
}

std::optional<MemberAction> MemberCore::on_resigned(Time, const MemberFacts&) {
  if (!std::exchange(resigning_, false)) return std::nullopt;
  return stand_down("resigned", Then::next_step);
}

std::optional<MemberAction> MemberCore::on_publish(Time, const MemberFacts&) {
  // A leader publishes at its renewals only: woken each poll to look at its data dir, an etcd
  // write each time would cost its appends.
  if (leading_ && !renewal_due_) return std::nullopt;
  return act(Kind::publish_applied, Then::next_step);
}

std::optional<MemberAction> MemberCore::on_compact(Time now, const MemberFacts&) {
  if (!leading_ || now < next_compaction_) return std::nullopt;
  next_compaction_ = now + timing_.compact_interval;
  return act(Kind::compact, Then::end_pass);
}

}  // namespace hf3fs_meta::server::ha
