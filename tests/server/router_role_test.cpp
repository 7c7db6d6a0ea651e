// An HA member's front: the Router with a Role (ha/role.hpp) answers as the leader only
// while the role is leader and its lease surely lives; otherwise every route but /healthz and
// /metrics is 503 "not the leader: nothing applied", naming the leader when known, and nothing is
// applied. /healthz and /metrics say the role. No sockets, no etcd: the test sets the role.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "hf3fs_meta/routes.hpp"
#include "hf3fs_meta/state.hpp"
#include "metrics.hpp"
#include "router.hpp"
#include "server_options.hpp"
#include "tenants.hpp"

namespace hf3fs_meta::server {
namespace {

using ::testing::HasSubstr;

class RouterRoleTest : public ::testing::Test {
 protected:
  RouterRoleTest() { router_.set_role(&role_); }

  Exchange& send(std::string method, std::string target, std::string body = {}) {
    Request request;
    request.method = std::move(method);
    request.target = std::move(target);
    request.body = std::move(body);
    exchange_.reset();
    EXPECT_EQ(router_.step(request, exchange_), Router::Next::reply);
    return exchange_;
  }
  Exchange& initialize() { return send("POST", "/rank/0/initialize", R"({"num_pages":4})"); }
  void lease_for(std::chrono::seconds ttl) { lease_.renewed(std::chrono::steady_clock::now(), ttl); }

  ServerOptions options_;
  Metrics metrics_{1};
  MetadataState state_;
  Router router_{options_, state_, metrics_};
  ha::LeaseWindow lease_{std::chrono::milliseconds(0)};
  ha::Role role_{lease_};
  Exchange exchange_;
};

TEST_F(RouterRoleTest, ACandidateAppliesNothingAndNamesNoLeader) {
  const Exchange& answer = initialize();
  EXPECT_EQ(answer.reply.status, 503);
  EXPECT_EQ(answer.reply.body, R"({"detail":"not the leader: nothing applied"})");
  EXPECT_THAT(answer.reply.body, HasSubstr(kNotLeaderDetailPrefix));
  EXPECT_EQ(answer.reply.leader, "");
  EXPECT_EQ(state_.rank_count(), 0u);
}

TEST_F(RouterRoleTest, AStandbyNamesTheLeaderOnEveryRouteButHealthAndMetrics) {
  role_.set(ha::RoleName::standby, "http://127.0.0.1:18001");
  for (const auto& [method, target] : {std::pair{"POST", "/rank/0/initialize"}, std::pair{"POST", "/keys/batch_exists"},
                                       std::pair{"GET", "/nothing/here"}, std::pair{"GET", "/_ha/snapshot"}}) {
    const Exchange& answer = send(method, target, "{}");
    EXPECT_EQ(answer.reply.status, 503) << target;
    EXPECT_EQ(answer.reply.leader, "http://127.0.0.1:18001") << target;
  }
  EXPECT_EQ(state_.rank_count(), 0u);
  const Exchange& health = send("GET", "/healthz");
  EXPECT_EQ(health.reply.status, 200);
  EXPECT_EQ(health.reply.body,
            R"({"status":"ok","role":"standby","leader":"http://127.0.0.1:18001","applied_seq":0})");
  const Exchange& metrics = send("GET", "/metrics");
  EXPECT_EQ(metrics.reply.status, 200);
  EXPECT_THAT(metrics.reply.body, HasSubstr(R"(hf3fs_meta_ha_role{role="standby"} 1)"));
  EXPECT_THAT(metrics.reply.body, HasSubstr(R"(hf3fs_meta_ha_role{role="leader"} 0)"));
}

TEST_F(RouterRoleTest, TheLeaderAnswersOnlyWhileItsLeaseSurelyLives) {
  role_.set(ha::RoleName::leader, "http://127.0.0.1:18002");
  // Won, but no lease renewed yet: nothing.
  EXPECT_EQ(initialize().reply.status, 503);
  lease_for(std::chrono::seconds(60));
  EXPECT_EQ(initialize().reply.status, 200);
  EXPECT_EQ(state_.rank_count(), 1u);
  EXPECT_EQ(send("POST", "/keys/batch_exists", R"({"keys":["a"]})").reply.status, 200);  // reads too
  const std::uint64_t seq = state_.seq();
  lease_.lost();  // the lease lapsed: reads and changes stop at once
  EXPECT_EQ(send("POST", "/keys/batch_exists", R"({"keys":["a"]})").reply.status, 503);
  const Exchange& refused = send("POST", "/rank/1/initialize", R"({"num_pages":4})");
  EXPECT_EQ(refused.reply.status, 503);
  EXPECT_EQ(refused.reply.leader, "");  // not itself: a client sent there would only come back
  EXPECT_EQ(state_.seq(), seq);
  EXPECT_EQ(send("GET", "/healthz").reply.body, R"({"status":"ok","role":"candidate","leader":"","applied_seq":)" +
                                                    std::to_string(seq) + "}");
  lease_for(std::chrono::seconds(60));
  const Exchange& health = send("GET", "/healthz");
  EXPECT_EQ(health.reply.body, R"({"status":"ok","role":"leader","leader":"http://127.0.0.1:18002","applied_seq":)" +
                                   std::to_string(seq) + "}");
}

// A log the member cannot apply is said, not lagged silently: on /healthz (why) and /metrics,
// until an entry applies again.
TEST_F(RouterRoleTest, ALogTheMemberCannotApplyIsSaidOnHealthAndMetricsUntilItApplies) {
  role_.set(ha::RoleName::standby, "http://a");
  const std::string why = "log entry 5 (revision 9) holds records 3-5, which do not follow record 4";
  role_.log_failed(why);
  role_.log_failed(why);  // following again a second later, refused again
  EXPECT_EQ(send("GET", "/healthz").reply.body,
            R"({"status":"ok","role":"standby","leader":"http://a","applied_seq":0,"log_error":")" + why + R"("})");
  const Exchange& failing = send("GET", "/metrics");
  EXPECT_THAT(failing.reply.body, HasSubstr("\nhf3fs_meta_ha_log_unappliable 1\n"));
  EXPECT_THAT(failing.reply.body, HasSubstr("\nhf3fs_meta_ha_log_apply_failures_total 2\n"));
  role_.log_applied();
  EXPECT_EQ(send("GET", "/healthz").reply.body, R"({"status":"ok","role":"standby","leader":"http://a","applied_seq":0})");
  const Exchange& applying = send("GET", "/metrics");
  EXPECT_THAT(applying.reply.body, HasSubstr("\nhf3fs_meta_ha_log_unappliable 0\n"));
  EXPECT_THAT(applying.reply.body, HasSubstr("\nhf3fs_meta_ha_log_apply_failures_total 2\n"));
}

TEST_F(RouterRoleTest, LeaderChangesCountOnlyNewLeaders) {
  lease_for(std::chrono::seconds(60));
  role_.set(ha::RoleName::standby, "http://a");
  role_.demote();
  role_.set(ha::RoleName::standby, "http://a");  // the same one again after not knowing
  EXPECT_EQ(role_.leader_changes(), 0u);
  role_.set(ha::RoleName::leader, "http://b");
  EXPECT_EQ(role_.leader_changes(), 1u);
  EXPECT_EQ(role_.leader(), "http://b");
  lease_.lost();  // a lapsed leader names nobody, and says it is a candidate
  EXPECT_EQ(role_.leader(), "");
  EXPECT_EQ(role_.answered(), ha::RoleName::candidate);
  EXPECT_EQ(role_.name(), ha::RoleName::leader);  // until its member learns it
  role_.demote();
  EXPECT_EQ(role_.leader(), "");
  EXPECT_EQ(role_.name(), ha::RoleName::candidate);
}

TEST_F(RouterRoleTest, TheLeaderWithoutADataDirHasNoSnapshotToServe) {
  lease_for(std::chrono::seconds(60));
  role_.set(ha::RoleName::leader, "http://127.0.0.1:18002");
  const Exchange& answer = send("GET", "/_ha/snapshot");
  EXPECT_EQ(answer.reply.status, 503);
  EXPECT_THAT(answer.reply.body, HasSubstr("no data dir"));
  EXPECT_EQ(send("POST", "/_ha/snapshot").reply.status, 405);
}

// Without --ha-etcd the route does not exist for anyone: 404, also to a tenant (not "operator only").
TEST(RouterWithoutRoleTest, TheSnapshotRouteIsNoRouteOfASingleServer) {
  for (const bool with_tenants : {false, true}) {
    ServerOptions options;
    if (with_tenants) {
      auto parsed = TenantTable::parse("t.conf", "tok-a model-a\n", {});
      ASSERT_TRUE(parsed.table) << parsed.error;
      options.tenants = parsed.table;
    }
    Metrics metrics{1};
    MetadataState state;
    Router router{options, state, metrics};
    Request request;
    request.method = "GET";
    request.target = "/_ha/snapshot";
    if (with_tenants) request.authorization = "Bearer tok-a";
    Exchange exchange;
    ASSERT_EQ(router.step(request, exchange), Router::Next::reply);
    EXPECT_EQ(exchange.reply.status, 404) << with_tenants << " " << exchange.reply.body;
    EXPECT_EQ(exchange.reply.leader, "");
  }
}

}  // namespace
}  // namespace hf3fs_meta::server
