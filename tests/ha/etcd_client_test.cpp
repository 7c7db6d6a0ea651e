// EtcdClient and EtcdWatch against a real 3-member etcd 3.4 on loopback (support/etcd_cluster.hpp):
// what each call answers, and what a failure says about whether a write happened.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "client/http_peer.hpp"
#include "ha/etcd_client.hpp"
#include "ha/etcd_watch.hpp"
#include "support/etcd_suite.hpp"

namespace hf3fs_meta::server::ha {
namespace {

using ::hf3fs_meta::testing::HttpPeer;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

// A loopback port where nothing listens: connections to it are refused, so a request to it is
// certainly not sent.
std::string refused_endpoint() { return "http://127.0.0.1:1"; }

class EtcdClientTest : public ::hf3fs_meta::testing::EtcdSuite {
 protected:
  static EtcdOptions options(std::vector<std::string> endpoints = {}) {
    EtcdOptions o;
    o.endpoints = endpoints.empty() ? cluster_->client_urls() : std::move(endpoints);
    o.request_timeout = 2000ms;
    return o;
  }

  // The cluster's members behind `first` (a member that does not answer), 300 ms an attempt.
  static EtcdOptions behind(HttpPeer& first) {
    auto endpoints = cluster_->client_urls();
    endpoints.insert(endpoints.begin(), first.url());
    EtcdOptions o = options(endpoints);
    o.request_timeout = 300ms;
    return o;
  }

  // A key of this test's own.
  std::string key(std::string_view suffix) const { return "/test/" + test_name() + "/" + std::string(suffix); }

  // Two values of key("k"), the history compacted up to the second: the revision of each.
  std::pair<std::int64_t, std::int64_t> two_values_compacted(EtcdClient& client) {
    const auto first = client.put({key("k"), "1"});
    const auto second = client.put({key("k"), "2"});
    EXPECT_TRUE(first && second);
    if (!first || !second) return {0, 0};
    EXPECT_TRUE(client.compact(second.value().revision));
    return {first.value().revision, second.value().revision};
  }
};

TEST_F(EtcdClientTest, PutRangeAndDeleteAcrossMembers) {
  const auto urls = cluster_->client_urls();
  EtcdClient first({options({urls[0]})});
  EtcdClient second({options({urls[1]})});
  const auto put = first.put({key("a"), std::string("v\0\xff", 3)});
  ASSERT_TRUE(put) << put.error().message;
  ASSERT_TRUE(first.put({key("b"), "w"}));

  const auto one = second.range({key("a")});
  ASSERT_TRUE(one) << one.error().message;
  ASSERT_EQ(one.value().kvs.size(), 1u);
  EXPECT_EQ(one.value().kvs[0].value, std::string("v\0\xff", 3));
  EXPECT_EQ(one.value().kvs[0].mod_revision, put.value().revision);

  const auto both = second.range({key(""), prefix_end(key(""))});
  ASSERT_TRUE(both);
  ASSERT_EQ(both.value().kvs.size(), 2u);
  EXPECT_EQ(both.value().kvs[1].key, key("b"));

  const auto deleted = second.delete_range({key(""), prefix_end(key(""))});
  ASSERT_TRUE(deleted);
  EXPECT_EQ(deleted.value().deleted, 2);
  EXPECT_TRUE(first.range({key("a")}).value().kvs.empty());
}

TEST_F(EtcdClientTest, ATxnCreatesAKeyOnceAndTheLoserSeesTheWinner) {
  EtcdClient client(options());
  TxnRequest campaign;
  campaign.compare.push_back({key("leader"), Compare::Target::create, Compare::Result::equal, 0, {}});
  campaign.success.emplace_back(PutRequest{key("leader"), "one"});
  campaign.failure.emplace_back(RangeRequest{key("leader")});
  const auto won = client.txn(campaign);
  ASSERT_TRUE(won) << won.error().message;
  EXPECT_TRUE(won.value().succeeded);

  std::get<PutRequest>(campaign.success[0]).value = "two";
  const auto lost = client.txn(campaign);
  ASSERT_TRUE(lost);
  EXPECT_FALSE(lost.value().succeeded);
  ASSERT_EQ(lost.value().responses.size(), 1u);
  const auto& winner = std::get<RangeResponse>(lost.value().responses[0]);
  ASSERT_EQ(winner.kvs.size(), 1u);
  EXPECT_EQ(winner.kvs[0].value, "one");
  // The create revision is the revision of the Txn that made it: the winner's fencing token.
  EXPECT_EQ(winner.kvs[0].create_revision, won.value().revision);
}

TEST_F(EtcdClientTest, LeasesAreGrantedRenewedAndRevoked) {
  EtcdClient client(options());
  const auto lease = client.lease_grant(2);
  ASSERT_TRUE(lease) << lease.error().message;
  EXPECT_EQ(lease.value().ttl, 2);
  const auto renewed = client.lease_keepalive(lease.value().id);
  ASSERT_TRUE(renewed) << renewed.error().message;
  EXPECT_EQ(renewed.value(), 2);
  ASSERT_TRUE(client.put({key("held"), "x", lease.value().id}));

  ASSERT_TRUE(client.lease_revoke(lease.value().id));
  EXPECT_TRUE(client.range({key("held")}).value().kvs.empty());  // revoking deletes what it held
  const auto gone = client.lease_keepalive(lease.value().id);
  ASSERT_TRUE(gone) << gone.error().message;
  EXPECT_EQ(gone.value(), 0);

  const auto unknown = client.lease_revoke(lease.value().id);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().kind, EtcdError::Kind::not_applied);
  EXPECT_EQ(unknown.error().code, kGrpcNotFound);
  EXPECT_THAT(unknown.error().message, HasSubstr("lease not found"));
  const auto put = client.put({key("orphan"), "x", lease.value().id});
  ASSERT_FALSE(put);
  EXPECT_EQ(put.error().code, kGrpcNotFound);
}

TEST_F(EtcdClientTest, AMemberThatRefusesConnectionsIsPassedForReadsAndWrites) {
  auto endpoints = cluster_->client_urls();
  endpoints.insert(endpoints.begin(), refused_endpoint());
  EtcdClient client(options(endpoints));
  ASSERT_TRUE(client.put({key("k"), "v"}));  // not sent to the first: safe to send to the next
  EXPECT_NE(client.current_endpoint(), refused_endpoint());
  EXPECT_EQ(client.range({key("k")}).value().kvs.size(), 1u);
}

// A member that takes connections and never answers, as a stopped one (SIGSTOP) does: a read waits
// one attempt for it, then is answered by the next; the calls after it start at the member that
// answered, so the silent one costs no more than that attempt.
TEST_F(EtcdClientTest, AMemberThatDoesNotAnswerCostsOneAttemptAndIsThenPassedOver) {
  HttpPeer stopped(HttpPeer::Mode::silent);
  EtcdClient client(behind(stopped));
  const auto read = client.range({key("k")});
  ASSERT_TRUE(read) << read.error().message;
  EXPECT_EQ(client.current_endpoint(), cluster_->client_url(0));
  EXPECT_EQ(stopped.requests().size(), 1u);
  ASSERT_TRUE(client.put({key("k"), "v"}));
  EXPECT_EQ(client.range({key("k")}).value().kvs.size(), 1u);
  EXPECT_EQ(stopped.requests().size(), 1u);
}

// A write whose answer never came may have been applied: it is not sent to another member (its
// caller decides whether a repeat is safe), but the next call starts at the next member.
TEST_F(EtcdClientTest, AWriteLostInASilentMemberIsUnknownNotRepeatedAndTheNextCallStartsAtTheNext) {
  HttpPeer stopped(HttpPeer::Mode::silent);
  EtcdClient client(behind(stopped));
  const auto put = client.put({key("k"), "v"});
  ASSERT_FALSE(put);
  EXPECT_EQ(put.error().kind, EtcdError::Kind::unknown);
  EXPECT_THAT(put.error().message, HasSubstr(stopped.url().append("/v3/kv/put")));
  EXPECT_EQ(client.current_endpoint(), cluster_->client_url(0));
  EXPECT_TRUE(client.range({key("k")}).value().kvs.empty());  // no member was sent it but the silent one
  EXPECT_EQ(stopped.requests().size(), 1u);
}

// Each attempt waits at most the attempt timeout, and the call as a whole its own: with members
// left but the call's time spent, none is tried.
TEST_F(EtcdClientTest, ACallEndsWhenItsTimeoutIsSpentThoughMembersAreLeft) {
  HttpPeer a(HttpPeer::Mode::silent);
  HttpPeer b(HttpPeer::Mode::silent);
  HttpPeer c(HttpPeer::Mode::silent);
  EtcdOptions o = options({a.url(), b.url(), c.url()});
  o.request_timeout = 1000ms;
  o.call_timeout = 1500ms;  // a's whole attempt, half of b's, none of c's
  EtcdClient client(o);
  const auto read = client.range({key("k")});
  ASSERT_FALSE(read);
  EXPECT_EQ(read.error().kind, EtcdError::Kind::unknown);
  EXPECT_THAT(read.error().message, HasSubstr("no etcd member answered /v3/kv/range"));
  EXPECT_THAT(read.error().message, HasSubstr(a.url()));
  EXPECT_THAT(read.error().message, HasSubstr(b.url()));
  EXPECT_THAT(read.error().message, ::testing::Not(HasSubstr(c.url())));
  EXPECT_EQ(a.requests().size(), 1u);
  EXPECT_TRUE(c.requests().empty());
  EXPECT_EQ(client.current_endpoint(), c.url());  // where the next call starts
}

TEST_F(EtcdClientTest, NoMemberAnsweringSaysEachOneAndThatNothingWasApplied) {
  EtcdClient client(options({refused_endpoint(), "http://127.0.0.1:2"}));
  const auto put = client.put({key("k"), "v"});
  ASSERT_FALSE(put);
  EXPECT_EQ(put.error().kind, EtcdError::Kind::not_applied);
  EXPECT_THAT(put.error().message, HasSubstr("no etcd member answered /v3/kv/put"));
  EXPECT_THAT(put.error().message, HasSubstr("127.0.0.1:1"));
  EXPECT_THAT(put.error().message, HasSubstr("127.0.0.1:2"));
}

TEST_F(EtcdClientTest, CompactionDropsOldRevisions) {
  EtcdClient client(options());
  const auto [first, second] = two_values_compacted(client);
  ASSERT_NE(second, 0);
  RangeRequest old{key("k")};
  old.revision = first;
  const auto read = client.range(old);
  ASSERT_FALSE(read);
  EXPECT_EQ(read.error().code, kGrpcOutOfRange);
  EXPECT_THAT(read.error().message, HasSubstr("compacted"));
}

TEST_F(EtcdClientTest, ACompactionAlreadyDoneCountsAsDone) {
  EtcdClient client(options());
  const auto [first, second] = two_values_compacted(client);
  ASSERT_NE(second, 0);
  // A repeat (its first answer lost), or an older revision another member compacted past.
  const auto again = client.compact(second);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again.value(), second);
  EXPECT_TRUE(client.compact(first));
  // A revision not yet written is still refused.
  const auto future = client.compact(second + 1000);
  ASSERT_FALSE(future);
  EXPECT_EQ(future.error().code, kGrpcOutOfRange);
  EXPECT_THAT(future.error().message, HasSubstr("future revision"));
}

// Collects a watch's messages and its end, for a test thread to wait on.
struct WatchLog {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<WatchResponse> messages;
  std::vector<WatchEvent> events;
  std::string end;

  EtcdWatch::OnMessage on_message() {
    return [this](WatchResponse&& m) {
      std::lock_guard lock(mutex);
      events.insert(events.end(), m.events.begin(), m.events.end());
      messages.push_back(std::move(m));
      changed.notify_all();
    };
  }
  EtcdWatch::OnEnd on_end() {
    return [this](std::string why) {
      std::lock_guard lock(mutex);
      end = why.empty() ? "(empty)" : std::move(why);
      changed.notify_all();
    };
  }
  template <class Pred>
  bool wait(Pred pred) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, 10s, [&] { return pred(*this); });
  }
};

TEST_F(EtcdClientTest, AWatchStreamsPutsAndDeletesFromItsStartRevision) {
  EtcdClient client(options());
  const auto before = client.put({key("w/1"), "x"});  // before the watch starts, after its start revision
  ASSERT_TRUE(before);
  WatchLog log;
  EtcdWatch watch(cluster_->client_urls()[1], 500ms, key("w/"), prefix_end(key("w/")), before.value().revision,
                  log.on_message(), log.on_end());
  ASSERT_TRUE(client.delete_range({key("w/1")}));
  ASSERT_TRUE(client.put({key("other"), "not watched"}));
  ASSERT_TRUE(client.put({key("w/2"), "y"}));
  ASSERT_TRUE(log.wait([](WatchLog& l) { return l.events.size() >= 3 || !l.end.empty(); })) << "no events";
  ASSERT_TRUE(log.end.empty()) << log.end;
  EXPECT_TRUE(log.messages.front().created);
  ASSERT_EQ(log.events.size(), 3u);
  EXPECT_EQ(log.events[0].type, WatchEvent::Type::put);
  EXPECT_EQ(log.events[0].kv.key, key("w/1"));
  EXPECT_EQ(log.events[1].type, WatchEvent::Type::del);
  EXPECT_EQ(log.events[2].kv.value, "y");

  const auto start = std::chrono::steady_clock::now();
  watch.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);  // woken, not left to a poll's timeout
  EXPECT_TRUE(log.end.empty());  // stop() is not an end of the stream
}

TEST_F(EtcdClientTest, AWatchFromACompactedRevisionEndsSayingSo) {
  EtcdClient client(options());
  const auto [first, second] = two_values_compacted(client);
  ASSERT_NE(second, 0);
  WatchLog log;
  EtcdWatch watch(cluster_->client_urls()[0], 500ms, key("k"), {}, first, log.on_message(), log.on_end());
  ASSERT_TRUE(log.wait([](WatchLog& l) { return !l.end.empty(); }));
  EXPECT_THAT(log.end, HasSubstr("compacted"));
  EXPECT_THAT(log.end, HasSubstr(std::to_string(second)));
}

TEST_F(EtcdClientTest, AWatchOnAMemberThatDiesEnds) {
  WatchLog log;
  EtcdWatch watch(cluster_->client_urls()[2], 500ms, key("k"), {}, 0, log.on_message(), log.on_end());
  ASSERT_TRUE(log.wait([](WatchLog& l) { return !l.messages.empty(); }));  // created
  cluster_->kill(2);
  EXPECT_TRUE(log.wait([](WatchLog& l) { return !l.end.empty(); }));
  EXPECT_THAT(log.end, HasSubstr(cluster_->client_url(2) + "/v3/watch"));  // which stream, and why
  cluster_->restart(2);
}

TEST_F(EtcdClientTest, WithoutAQuorumWritesFailAndSayWhetherTheyHappened) {
  cluster_->kill(1);
  cluster_->kill(2);
  EtcdOptions o = options({cluster_->client_urls()[0]});
  o.request_timeout = 1000ms;
  EtcdClient client(o);
  const auto put = client.put({key("k"), "v"});
  ASSERT_FALSE(put);
  // Either the member knew it had no leader (never proposed), or the proposal timed out (it could
  // yet be applied, were the quorum back with it): the two must not be confused.
  if (put.error().kind == EtcdError::Kind::not_applied) {
    EXPECT_THAT(put.error().message, HasSubstr("no leader"));
  } else {
    EXPECT_THAT(put.error().message, ::testing::AnyOf(HasSubstr("timed out"), HasSubstr("Timeout")));
  }
  cluster_->restart(1);
  cluster_->restart(2);
  ASSERT_NO_THROW(cluster_->wait_healthy(20s));
  EtcdClient after(options());
  EXPECT_TRUE(after.put({key("k2"), "v"}));
}

}  // namespace
}  // namespace hf3fs_meta::server::ha
