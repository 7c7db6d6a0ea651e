// etcd's JSON gateway as values: the request bodies written, and answers read as etcd 3.4.23 wrote
// them (the samples below are its answers, captured with curl).
#include "ha/etcd_codec.hpp"
#include "ha/etcd_client.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace hf3fs_meta::server::ha {
namespace {

using ::testing::HasSubstr;

TEST(EtcdCodecTest, Base64RoundTripsEveryLengthAndByte) {
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<char>(i));
  for (std::size_t n = 0; n <= 7; ++n) {
    const std::string part = bytes.substr(250 - n, n);
    const auto decoded = base64_decode(base64_encode(part));
    ASSERT_TRUE(decoded) << n;
    EXPECT_EQ(decoded.value(), part) << n;
  }
  EXPECT_EQ(base64_encode(bytes.substr(0, 256)).size(), 344u);
  EXPECT_EQ(base64_decode(base64_encode(bytes)).value(), bytes);
  EXPECT_EQ(base64_encode("/t/leader"), "L3QvbGVhZGVy");
  EXPECT_EQ(base64_decode("bWU=").value(), "me");
}

TEST(EtcdCodecTest, Base64RefusesWhatIsNotBase64) {
  EXPECT_FALSE(base64_decode("bWU"));    // not a multiple of 4
  EXPECT_FALSE(base64_decode("bW!="));   // a byte outside the alphabet
  EXPECT_FALSE(base64_decode(" bWU="));  // whitespace EVP_DecodeBlock would skip
  EXPECT_FALSE(base64_decode("bW=U"));   // padding inside
  EXPECT_FALSE(base64_decode("bWV="));   // "me" with a padding bit set: not the canonical text
  EXPECT_FALSE(base64_decode("bR=="));
  EXPECT_EQ(base64_decode("bQ==").value(), "m");
  EXPECT_EQ(base64_decode("").value(), "");
}

TEST(EtcdCodecTest, PrefixEndIncrementsTheLastByteBelow0xff) {
  EXPECT_EQ(prefix_end("/a/"), "/a0");
  EXPECT_EQ(prefix_end(std::string("a\xff\xff", 3)), "b");
  EXPECT_EQ(prefix_end(std::string("\xff", 1)), std::string(1, '\0'));
}

TEST(EtcdCodecTest, WritesRequestsAsTheGatewayReadsThem) {
  EXPECT_EQ(encode(RangeRequest{"/a", prefix_end("/a"), 10, 7, true}),
            R"({"key":"L2E=","range_end":"L2I=","limit":"10","revision":"7","keys_only":true})");
  EXPECT_EQ(encode(RangeRequest{"/a"}), R"({"key":"L2E="})");
  EXPECT_EQ(encode(PutRequest{"k", "v", 42}), R"({"key":"aw==","value":"dg==","lease":"42"})");
  EXPECT_EQ(encode(PutRequest{"k", ""}), R"({"key":"aw==","value":""})");
  EXPECT_EQ(encode(DeleteRequest{"k", "l"}), R"({"key":"aw==","range_end":"bA=="})");
  EXPECT_EQ(encode_lease_grant(3), R"({"TTL":"3"})");
  EXPECT_EQ(encode_lease_id(-5), R"({"ID":"-5"})");
  EXPECT_EQ(encode_compaction(9), R"({"revision":"9"})");
  EXPECT_EQ(encode_watch_create("/w/", "/w0", 2),
            R"({"create_request":{"key":"L3cv","range_end":"L3cw","start_revision":"2"}})");
}

TEST(EtcdCodecTest, WritesATxnWithEveryCompareAndOp) {
  TxnRequest txn;
  txn.compare.push_back({"a", Compare::Target::create, Compare::Result::equal, 0, {}});
  txn.compare.push_back({"b", Compare::Target::mod, Compare::Result::less, 5, {}});
  txn.compare.push_back({"c", Compare::Target::value, Compare::Result::not_equal, 0, "x"});
  txn.compare.push_back({"d", Compare::Target::version, Compare::Result::greater, 1, {}});
  txn.compare.push_back({"e", Compare::Target::lease, Compare::Result::equal, 7, {}});
  txn.success.emplace_back(PutRequest{"a", "1", 0});
  txn.success.emplace_back(DeleteRequest{"b", {}});
  txn.failure.emplace_back(RangeRequest{"a"});
  EXPECT_EQ(encode(txn),
            R"({"compare":[)"
            R"({"result":"EQUAL","target":"CREATE","key":"YQ==","create_revision":"0"},)"
            R"({"result":"LESS","target":"MOD","key":"Yg==","mod_revision":"5"},)"
            R"({"result":"NOT_EQUAL","target":"VALUE","key":"Yw==","value":"eA=="},)"
            R"({"result":"GREATER","target":"VERSION","key":"ZA==","version":"1"},)"
            R"({"result":"EQUAL","target":"LEASE","key":"ZQ==","lease":"7"}],)"
            R"("success":[{"request_put":{"key":"YQ==","value":"MQ=="}},{"request_delete_range":{"key":"Yg=="}}],)"
            R"("failure":[{"request_range":{"key":"YQ=="}}]})");
}

constexpr const char* kHeader =
    R"("header":{"cluster_id":"324952591200643719","member_id":"3319814642761637952","revision":"2","raft_term":"2"})";

TEST(EtcdCodecTest, ReadsATxnThatSucceededAndOneThatFailed) {
  const auto won = decode_txn(std::string("{") + kHeader +
                              R"(,"succeeded":true,"responses":[{"response_put":{"header":{"revision":"2"}}}]})");
  ASSERT_TRUE(won) << won.error().message;
  EXPECT_TRUE(won.value().succeeded);
  EXPECT_EQ(won.value().revision, 2);
  ASSERT_EQ(won.value().responses.size(), 1u);
  EXPECT_EQ(std::get<PutResponse>(won.value().responses[0]).revision, 2);

  // A failed compare: no "succeeded" at all, and the failure branch's answers.
  const auto lost = decode_txn(
      std::string("{") + kHeader +
      R"(,"responses":[{"response_range":{"header":{"revision":"2"},"kvs":[{"key":"L3QvbGVhZGVy",)"
      R"("create_revision":"2","mod_revision":"2","version":"1","value":"bWU=","lease":"2324035764489673735"}],)"
      R"("count":"1"}},{"response_delete_range":{"header":{"revision":"2"},"deleted":"3"}}]})");
  ASSERT_TRUE(lost) << lost.error().message;
  EXPECT_FALSE(lost.value().succeeded);
  ASSERT_EQ(lost.value().responses.size(), 2u);
  const auto& range = std::get<RangeResponse>(lost.value().responses[0]);
  ASSERT_EQ(range.kvs.size(), 1u);
  EXPECT_EQ(range.kvs[0].key, "/t/leader");
  EXPECT_EQ(range.kvs[0].value, "me");
  EXPECT_EQ(range.kvs[0].create_revision, 2);
  EXPECT_EQ(range.kvs[0].lease, 2324035764489673735);
  EXPECT_EQ(range.count, 1);
  EXPECT_EQ(std::get<DeleteResponse>(lost.value().responses[1]).deleted, 3);
}

TEST(EtcdCodecTest, ReadsRangesAndLeases) {
  const auto empty = decode_range(std::string("{") + kHeader + "}");
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty.value().kvs.empty());
  EXPECT_EQ(empty.value().revision, 2);

  const auto grant = decode_lease_grant(std::string("{") + kHeader + R"(,"ID":"2324035764489673733","TTL":"2"})");
  ASSERT_TRUE(grant);
  EXPECT_EQ(grant.value().id, 2324035764489673733);
  EXPECT_EQ(grant.value().ttl, 2);

  const auto alive = decode_lease_keepalive(std::string(R"({"result":{)") + kHeader + R"(,"ID":"7","TTL":"2"}})");
  ASSERT_TRUE(alive);
  EXPECT_EQ(alive.value(), 2);
  // A lease that has expired: the renewal answers no TTL.
  const auto gone = decode_lease_keepalive(std::string(R"({"result":{)") + kHeader + R"(,"ID":"7"}})");
  ASSERT_TRUE(gone);
  EXPECT_EQ(gone.value(), 0);
}

TEST(EtcdCodecTest, ReadsAWatchStream) {
  const auto created = decode_watch_line(std::string(R"({"result":{)") + kHeader + R"(,"created":true}})");
  ASSERT_TRUE(created);
  EXPECT_TRUE(created.value().created);
  EXPECT_TRUE(created.value().events.empty());

  const auto events = decode_watch_line(
      std::string(R"({"result":{)") + kHeader +
      R"(,"events":[{"kv":{"key":"L3cvMQ==","create_revision":"4","mod_revision":"4","version":"1","value":"eA=="}},)"
      R"({"type":"DELETE","kv":{"key":"L3cvMQ==","mod_revision":"5"}}]}})");
  ASSERT_TRUE(events) << events.error().message;
  ASSERT_EQ(events.value().events.size(), 2u);
  EXPECT_EQ(events.value().events[0].type, WatchEvent::Type::put);
  EXPECT_EQ(events.value().events[0].kv.value, "x");
  EXPECT_EQ(events.value().events[1].type, WatchEvent::Type::del);
  EXPECT_EQ(events.value().events[1].kv.key, "/w/1");
  EXPECT_EQ(events.value().events[1].kv.mod_revision, 5);

  const auto compacted = decode_watch_line(
      R"({"result":{"header":{"raft_term":"2"},"canceled":true,"compact_revision":"5"}})");
  ASSERT_TRUE(compacted);
  EXPECT_TRUE(compacted.value().canceled);
  EXPECT_EQ(compacted.value().compact_revision, 5);
}

TEST(EtcdCodecTest, RefusesAnswersItCannotRead) {
  EXPECT_THAT(decode_txn("{bad").error().message, HasSubstr("not JSON"));
  EXPECT_THAT(decode_txn("[]").error().message, HasSubstr("not a JSON object"));
  EXPECT_THAT(decode_txn(R"({"succeeded":"yes"})").error().message, HasSubstr("\"succeeded\" is not a boolean"));
  EXPECT_THAT(decode_range(R"({"header":{"revision":"2x"}})").error().message, HasSubstr("\"revision\" is not a 64-bit integer"));
  EXPECT_THAT(decode_range(R"({"header":{"revision":""}})").error().message, HasSubstr("\"revision\""));
  EXPECT_THAT(decode_range(R"({"header":[]})").error().message, HasSubstr("\"header\" is not an object"));
  EXPECT_THAT(decode_range(R"({"kvs":{}})").error().message, HasSubstr("\"kvs\" is not an array"));
  EXPECT_THAT(decode_range(R"({"kvs":[{"key":"%%%="}]})").error().message, HasSubstr("\"key\" is not base64"));
  EXPECT_THAT(decode_range(R"({"kvs":[1]})").error().message, HasSubstr("not an object"));
  EXPECT_THAT(decode_txn(R"({"responses":[{"response_other":{}}]})").error().message, HasSubstr("no known kind"));
  EXPECT_THAT(decode_lease_grant(R"({"ID":"0","TTL":"2"})").error().message, HasSubstr("without an ID"));
  EXPECT_THAT(decode_lease_keepalive(R"({"ID":"7"})").error().message, HasSubstr("no \"result\""));
  EXPECT_THAT(decode_watch_line(R"({"result":{"events":[{"type":"EXPIRE","kv":{}}]}})").error().message,
              HasSubstr("neither PUT nor DELETE"));
  EXPECT_THAT(decode_watch_line(R"({"result":{"events":[{"type":"PUT"}]}})").error().message, HasSubstr("no \"kv\""));
  EXPECT_THAT(decode_watch_line(R"({"error":{"grpc_code":14,"message":"unavailable"}})").error().message,
              HasSubstr("ended with an error: unavailable"));
}

TEST(EtcdCodecTest, ReadsErrorAnswers) {
  const GatewayError lease = decode_error(
      R"({"error":"etcdserver: requested lease not found","message":"etcdserver: requested lease not found","code":5})");
  EXPECT_EQ(lease.code, 5);
  EXPECT_EQ(lease.message, "etcdserver: requested lease not found");
  // A streamed route's error (a keepalive on a member without a quorum).
  const GatewayError stream = decode_error(
      R"({"error":{"grpc_code":14,"http_code":503,"message":"etcdserver: no leader","http_status":"Service Unavailable"}})");
  EXPECT_EQ(stream.code, 14);
  EXPECT_EQ(stream.message, "etcdserver: no leader");
  const GatewayError other = decode_error("<html>bad gateway</html>");
  EXPECT_EQ(other.code, 0);
  EXPECT_EQ(other.message, "<html>bad gateway</html>");
}

TEST(EtcdEndpointsTest, TheListIsCheckedNamingTheBadEntry) {
  const auto two = parse_etcd_endpoints("http://127.0.0.1:2379/, http://127.0.0.1:2380");
  ASSERT_TRUE(two) << two.error();
  EXPECT_THAT(two.value(), ::testing::ElementsAre("http://127.0.0.1:2379", "http://127.0.0.1:2380"));
  EXPECT_THAT(parse_etcd_endpoints("http://a:1,,http://b:2").error(), HasSubstr("--ha-etcd[1]"));
  EXPECT_THAT(parse_etcd_endpoints("127.0.0.1:2379").error(), HasSubstr("--ha-etcd"));
  EXPECT_THAT(parse_etcd_endpoints("https://a:2379").error(), HasSubstr("not an http:// URL"));
}

}  // namespace
}  // namespace hf3fs_meta::server::ha
