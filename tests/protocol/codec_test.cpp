// The wire codec: exact encodings, round trips, and every decoder refusal with its exact text.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <optional>
#include <utility>
#include <string>
#include <string_view>
#include <vector>

#include "hf3fs_meta/protocol_server.hpp"
#include "hf3fs_meta/routes.hpp"

namespace hf3fs_meta::protocol {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// ---- Encoders ----

TEST(EncodeTest, InitializePath) {
  EXPECT_EQ(request_path(Route::initialize, 3), "/rank/3/initialize");
  EXPECT_EQ(request_path(Route::initialize, -7), "/rank/-7/initialize");
  EXPECT_EQ(request_path(Route::initialize, std::numeric_limits<Rank>::min()), "/rank/-9223372036854775808/initialize");
  EXPECT_EQ(request_path(Route::clear), "/clear");
  EXPECT_EQ(request_path(Route::batch_allocate, 3), "/keys/batch_allocate");
}

TEST(EncodeTest, ClientRequestsAreCompact) {
  EXPECT_EQ(encode_initialize_request(1024, Role::worker), R"({"num_pages":1024,"role":"worker"})");
  EXPECT_EQ(encode_initialize_request(0, Role::scheduler), R"({"num_pages":0,"role":"scheduler"})");
  const std::vector<BlockKey> keys{{"9e107d9d372bb6826bd81d3542a419d6", ""}, {"k", "p"}};
  EXPECT_EQ(encode_allocate_request(3, keys), R"({"rank":3,"keys":[["9e107d9d372bb6826bd81d3542a419d6",""],["k","p"]]})");
  EXPECT_EQ(encode_allocate_request(-1, {}), R"({"rank":-1,"keys":[]})");
  const std::vector<Confirmation> confirmations{{"a", 0}, {"b", 17}};
  const std::vector<Page> release{4, 5};
  EXPECT_EQ(encode_confirm_write_request(2, confirmations, release),
            R"({"rank":2,"confirmations":[["a",0],["b",17]],"pages_to_release":[4,5]})");
  EXPECT_EQ(encode_confirm_write_request(2, {}, {}), R"({"rank":2,"confirmations":[],"pages_to_release":[]})");
  const std::vector<std::string> names{"a", "b"};
  EXPECT_EQ(encode_batch_exists_request(names), R"({"keys":["a","b"]})");
  EXPECT_EQ(encode_batch_exists_request({}), R"({"keys":[]})");
  EXPECT_EQ(encode_get_locations_request(4, names), R"({"rank":4,"keys":["a","b"]})");
}

TEST(EncodeTest, ServerAnswersAsFastApiRendersThem) {
  const std::vector<BlockKey> keys{{"k", ""}, {"j", ""}};
  const std::vector<Page> pages{0, -1};
  EXPECT_EQ(encode_allocate_response(3, keys, pages), R"({"rank":3,"results":[["k",0],["j",-1]]})");
  EXPECT_EQ(encode_allocate_response(3, {}, {}), R"({"rank":3,"results":[]})");
  EXPECT_EQ(encode_batch_exists_response({true, false}), R"({"exists":[true,false]})");
  EXPECT_EQ(encode_batch_exists_response({}), R"({"exists":[]})");
  const std::vector<std::optional<Page>> locations{0, std::nullopt};
  EXPECT_EQ(encode_get_locations_response(locations), R"({"locations":[0,null]})");
  EXPECT_EQ(encode_message("Rank 3 initialized with 1024 pages"), R"({"message":"Rank 3 initialized with 1024 pages"})");
  EXPECT_EQ(encode_detail("Not Found"), R"({"detail":"Not Found"})");
  EXPECT_EQ(encode_path_rank_validation_error("abc"),
            R"({"detail":[{"type":"int_parsing","loc":["path","rank"],"msg":"Input should be a valid integer, unable to parse string as an integer","input":"abc"}]})");
}

TEST(EncodeTest, StringsEscapedAsPythonJsonDumps) {
  // json.dumps(..., ensure_ascii=False): short escapes, lowercase \u00xx, UTF-8 and DEL kept as is.
  EXPECT_EQ(encode_detail("a\"b\\c/d"), R"({"detail":"a\"b\\c/d"})");
  EXPECT_EQ(encode_detail("\b\f\n\r\t"), R"({"detail":"\b\f\n\r\t"})");
  EXPECT_EQ(encode_detail(std::string_view("\x00\x01\x1f\x7f", 4)), "{\"detail\":\"\\u0000\\u0001\\u001f\x7f\"}");
  EXPECT_EQ(encode_detail("cl\xC3\xA9 \xE2\x80\x94 \xF0\x9F\x98\x80"),
            "{\"detail\":\"cl\xC3\xA9 \xE2\x80\x94 \xF0\x9F\x98\x80\"}");
  EXPECT_EQ(encode_path_rank_validation_error("a\"b"), R"({"detail":[{"type":"int_parsing","loc":["path","rank"],"msg":"Input should be a valid integer, unable to parse string as an integer","input":"a\"b"}]})");
  const std::vector<BlockKey> keys{{"q\"uote", "new\nline"}};
  EXPECT_EQ(encode_allocate_request(0, keys), R"({"rank":0,"keys":[["q\"uote","new\nline"]]})");
}

// ---- Round trips ----

TEST(RoundTripTest, AllocateRequestAndAnswer) {
  const std::vector<BlockKey> keys{{"9e107d9d372bb6826bd81d3542a419d6", ""}, {"k\"\\\n\xC3\xA9", "p"}, {"", ""}};
  auto request = decode_allocate_request(encode_allocate_request(-5, keys));
  ASSERT_TRUE(request) << request.error().message;
  EXPECT_EQ(request.value().rank, -5);
  EXPECT_EQ(request.value().keys, keys);

  const std::vector<Page> pages{7, -1, 0};
  auto answer = decode_allocate_response(encode_allocate_response(-5, keys, pages), keys);
  ASSERT_TRUE(answer) << answer.error().message;
  const std::vector<Page> expected{7, -1, 0};
  EXPECT_EQ(answer.value(), expected);
}

TEST(RoundTripTest, ConfirmWriteRequest) {
  const std::vector<Confirmation> confirmations{{"a", 0}, {"b", std::numeric_limits<Page>::max()}, {"c", -3}};
  const std::vector<Page> release{std::numeric_limits<Page>::min(), 2};
  auto request = decode_confirm_write_request(encode_confirm_write_request(9, confirmations, release));
  ASSERT_TRUE(request) << request.error().message;
  EXPECT_EQ(request.value().rank, 9);
  EXPECT_EQ(request.value().confirmations, confirmations);
  EXPECT_EQ(request.value().pages_to_release, release);
}

TEST(RoundTripTest, ExistsAndLocations) {
  const std::vector<std::string> keys{"a", "b\tc", ""};
  auto exists_request = decode_batch_exists_request(encode_batch_exists_request(keys));
  ASSERT_TRUE(exists_request);
  EXPECT_EQ(exists_request.value().keys, keys);
  auto exists = decode_batch_exists_response(encode_batch_exists_response({true, false, true}), 3);
  ASSERT_TRUE(exists);
  EXPECT_EQ(exists.value(), (std::vector<bool>{true, false, true}));

  auto locations_request = decode_get_locations_request(encode_get_locations_request(1, keys));
  ASSERT_TRUE(locations_request);
  EXPECT_EQ(locations_request.value().rank, 1);
  EXPECT_EQ(locations_request.value().keys, keys);
  const std::vector<std::optional<Page>> pages{3, std::nullopt, 0};
  auto locations = decode_get_locations_response(encode_get_locations_response(pages), 3);
  ASSERT_TRUE(locations);
  EXPECT_EQ(locations.value(), pages);
}

TEST(RoundTripTest, Initialize) {
  auto worker = decode_initialize_request(encode_initialize_request(1024, Role::worker));
  ASSERT_TRUE(worker);
  EXPECT_EQ(worker.value().num_pages, 1024);
  EXPECT_EQ(worker.value().role, Role::worker);
  auto scheduler = decode_initialize_request(encode_initialize_request(5, Role::scheduler));
  ASSERT_TRUE(scheduler);
  EXPECT_EQ(scheduler.value().role, Role::scheduler);
  auto message = decode_initialize_response(encode_message("Rank 3 initialized with 1024 pages"));
  ASSERT_TRUE(message);
  EXPECT_EQ(message.value(), "Rank 3 initialized with 1024 pages");
}

TEST(ClientDecodeTest, AcceptsVllmSpacing) {
  const std::vector<BlockKey> sent{{"k", ""}, {"j", ""}};
  auto answer = decode_allocate_response(R"({"rank": 3, "results": [["k", 0], ["j", -1]]})", sent);
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer.value()[1], (-1));
}

// ---- Client decoder refusals ----

struct Refusal {
  std::string name;
  std::string body;
  std::string message;  // exact, or a prefix when `prefix_only`
  bool prefix_only = false;
};
void PrintTo(const Refusal& r, std::ostream* os) { *os << r.name; }

void expect_refusal(const DecodeError& error, const Refusal& r) {
  if (r.prefix_only) {
    EXPECT_THAT(error.message, StartsWith(r.message));
  } else {
    EXPECT_EQ(error.message, r.message);
  }
}

class AllocateAnswerRefusal : public ::testing::TestWithParam<Refusal> {};
TEST_P(AllocateAnswerRefusal, Refuses) {
  const std::vector<BlockKey> sent{{"a", ""}, {"b", ""}, {"c", ""}};
  auto result = decode_allocate_response(GetParam().body, sent);
  ASSERT_FALSE(result);
  expect_refusal(result.error(), GetParam());
}
INSTANTIATE_TEST_SUITE_P(
    Codec, AllocateAnswerRefusal,
    ::testing::Values(
        Refusal{"not_json", "Internal Server Error", "answer: not JSON (", true},
        Refusal{"empty", "", "answer: not JSON (", true},
        Refusal{"array", "[]", "answer: expected a JSON object"},
        Refusal{"missing", R"({"rank":3})", "results: missing from the answer"},
        Refusal{"not_list", R"({"results":{}})", "results: expected a list"},
        Refusal{"short", R"({"results":[["a",0],["b",1]]})",
                "results: expected 3 entries (one per key sent), got 2"},
        Refusal{"long", R"({"results":[["a",0],["b",1],["c",2],["d",3]]})",
                "results: expected 3 entries (one per key sent), got 4"},
        Refusal{"not_pair", R"({"results":[["a",0],"b",["c",2]]})", "results[1]: expected a [key, page] pair"},
        Refusal{"triple", R"({"results":[["a",0,1],["b",1],["c",2]]})", "results[0]: expected a [key, page] pair"},
        Refusal{"key_number", R"({"results":[["a",0],["b",1],[3,2]]})", "results[2]: expected a [key, page] pair"},
        Refusal{"wrong_key", R"({"results":[["a",0],["b",1],["x",2]]})",
                "results[2]: key 'x' was not sent at this position"},
        Refusal{"swapped", R"({"results":[["b",0],["a",1],["c",2]]})",
                "results[0]: key 'b' was not sent at this position"},
        Refusal{"page_below", R"({"results":[["a",0],["b",-2],["c",2]]})", "results[1]: page must be an integer >= -1"},
        Refusal{"page_float", R"({"results":[["a",0],["b",1.0],["c",2]]})",
                "results[1]: page must be an integer >= -1"},
        Refusal{"page_bool", R"({"results":[["a",true],["b",1],["c",2]]})",
                "results[0]: page must be an integer >= -1"},
        Refusal{"page_null", R"({"results":[["a",0],["b",1],["c",null]]})",
                "results[2]: page must be an integer >= -1"},
        Refusal{"page_huge", R"({"results":[["a",0],["b",1],["c",9223372036854775808]]})",
                "results[2]: page must be an integer >= -1"}),
    [](const auto& info) { return info.param.name; });

TEST(ClientDecodeTest, ExistsRefusals) {
  EXPECT_EQ(decode_batch_exists_response(R"({"exists":[true]})", 2).error().message,
            "exists: expected 2 entries (one per key sent), got 1");
  EXPECT_EQ(decode_batch_exists_response(R"({"exists":[true,1]})", 2).error().message,
            "exists[1]: expected a boolean");
  EXPECT_EQ(decode_batch_exists_response(R"({"exists":"yes"})", 2).error().message, "exists: expected a list");
  EXPECT_EQ(decode_batch_exists_response(R"({})", 0).error().message, "exists: missing from the answer");
  EXPECT_THAT(decode_batch_exists_response("{", 0).error().message, StartsWith("answer: not JSON ("));
  EXPECT_TRUE(decode_batch_exists_response(R"({"exists":[]})", 0));
}

TEST(ClientDecodeTest, DeleteKeysAnswer) {
  auto deleted = decode_delete_keys_response(encode_delete_keys_response({true, false}), 2);
  ASSERT_TRUE(deleted);
  EXPECT_EQ(deleted.value(), (std::vector<bool>{true, false}));
  EXPECT_EQ(decode_delete_keys_response(R"({"deleted":[true]})", 2).error().message,
            "deleted: expected 2 entries (one per key sent), got 1");
  EXPECT_EQ(decode_delete_keys_response(R"({"deleted":[1]})", 1).error().message, "deleted[0]: expected a boolean");
  EXPECT_EQ(decode_delete_keys_response(R"({"exists":[true]})", 1).error().message, "deleted: missing from the answer");
}

TEST(ClientDecodeTest, DropRankAnswer) {
  const DropOutcome outcome{true, 8, 3, 1};
  EXPECT_EQ(encode_drop_response(2, outcome), R"({"rank":2,"dropped":true,"pages":8,"mappings":3,"keys_removed":1})");
  auto decoded = decode_drop_response(encode_drop_response(2, outcome));
  ASSERT_TRUE(decoded) << decoded.error().message;
  EXPECT_EQ(decoded.value(), outcome);
  EXPECT_EQ(decode_drop_response(encode_drop_response(2, DropOutcome{})).value(), DropOutcome{});

  EXPECT_THAT(decode_drop_response("{").error().message, StartsWith("answer: not JSON ("));
  EXPECT_EQ(decode_drop_response("[]").error().message, "answer: expected a JSON object");
  EXPECT_EQ(decode_drop_response(R"({"pages":1})").error().message, "dropped: expected true or false");
  EXPECT_EQ(decode_drop_response(R"({"dropped":1})").error().message, "dropped: expected true or false");
  EXPECT_EQ(decode_drop_response(R"({"dropped":true,"mappings":0,"keys_removed":0})").error().message,
            "pages: expected a count");
  EXPECT_EQ(decode_drop_response(R"({"dropped":true,"pages":1,"mappings":-1,"keys_removed":0})").error().message,
            "mappings: expected a count");
  EXPECT_EQ(decode_drop_response(R"({"dropped":true,"pages":1,"mappings":0,"keys_removed":0.5})").error().message,
            "keys_removed: expected a count");
}

TEST(ClientDecodeTest, StatsAnswer) {
  StateStats stats;
  RankStats r0;
  r0.num_pages = 10;
  r0.free = 4;
  r0.allocated = 1;
  r0.mapped = 2;
  r0.orphaned = 1;
  r0.draining = 2;
  r0.kept_on_release = 7;
  stats.ranks = {{-3, RankStats{}}, {0, r0}};
  stats.keys_complete = 2;
  stats.keys_incomplete = 1;
  stats.keys_leased = 1;
  stats.key_records = 5;
  stats.evicted_keys = 11;
  stats.deleted_keys = 12;
  stats.reclaimed_keys = 13;
  stats.reclaimed_allocated_pages = 14;
  stats.reclaimed_orphaned_pages = 15;
  auto decoded = decode_stats_response(encode_stats_response(stats));
  ASSERT_TRUE(decoded) << decoded.error().message;
  const StateStats& d = decoded.value();
  ASSERT_EQ(d.ranks.size(), 2u);
  EXPECT_EQ(d.ranks[0].first, -3);
  EXPECT_EQ(d.ranks[1].first, 0);
  for (const auto& [name, member] : kRankStatsFields) EXPECT_EQ(d.ranks[1].second.*member, r0.*member) << name;
  EXPECT_EQ(d.ranks[1].second.kept_on_release, 7u);
  for (const auto& [name, member, counter, help] : kStateStatsFields) EXPECT_EQ(d.*member, stats.*member) << name;

  EXPECT_EQ(decode_stats_response(R"({"ranks":{}})").error().message, "ranks: expected a list");
  EXPECT_EQ(decode_stats_response(R"({"ranks":[1]})").error().message, "ranks[0]: expected an object");
  EXPECT_EQ(decode_stats_response(R"({"ranks":[{"rank":"0"}]})").error().message, "ranks[0].rank: expected an integer");
  EXPECT_EQ(decode_stats_response(R"({"ranks":[{"rank":0,"num_pages":-1}]})").error().message,
            "ranks[0].num_pages: expected a non-negative integer");
  EXPECT_EQ(decode_stats_response(R"({"ranks":[]})").error().message,
            "keys_complete: expected a non-negative integer");
  EXPECT_THAT(decode_stats_response("[]").error().message, StartsWith("answer: expected a JSON object"));
}

TEST(ClientDecodeTest, LocationsRefusals) {
  EXPECT_EQ(decode_get_locations_response(R"({"locations":[1]})", 2).error().message,
            "locations: expected 2 entries (one per key sent), got 1");
  EXPECT_EQ(decode_get_locations_response(R"({"locations":[1,"2"]})", 2).error().message,
            "locations[1]: expected an integer or null");
  EXPECT_EQ(decode_get_locations_response(R"({"locations":[1.5,2]})", 2).error().message,
            "locations[0]: expected an integer or null");
  EXPECT_EQ(decode_get_locations_response(R"({"locations":[false,2]})", 2).error().message,
            "locations[0]: expected an integer or null");
  EXPECT_EQ(decode_get_locations_response(R"({"exists":[]})", 0).error().message,
            "locations: missing from the answer");
}

TEST(ClientDecodeTest, InitializeRefusals) {
  EXPECT_EQ(decode_initialize_response(R"({"detail":"x"})").error().message, "message: missing from the answer");
  EXPECT_EQ(decode_initialize_response(R"({"message":3})").error().message, "message: expected a string");
  EXPECT_EQ(decode_initialize_response("null").error().message, "answer: expected a JSON object");
}

// ---- Server strict decoders ----

class AllocateRequestRefusal : public ::testing::TestWithParam<Refusal> {};
TEST_P(AllocateRequestRefusal, Refuses) {
  auto result = decode_allocate_request(GetParam().body);
  ASSERT_FALSE(result);
  expect_refusal(result.error(), GetParam());
}
const std::string kNeedKeys = "Invalid request format: need 'rank' and 'keys'";
INSTANTIATE_TEST_SUITE_P(
    Codec, AllocateRequestRefusal,
    ::testing::Values(
        Refusal{"empty_body", "", "body: expected a JSON object (invalid JSON: ", true},
        Refusal{"not_json", "rank=3", "body: expected a JSON object (invalid JSON: ", true},
        Refusal{"trailing", R"({"rank":3} x)", "body: expected a JSON object (invalid JSON: ", true},
        Refusal{"bad_utf8", "{\"rank\":3,\"keys\":[[\"\xFF\",\"\"]]}", "body: expected a JSON object (invalid JSON: ",
                true},
        Refusal{"array", "[]", "body: expected a JSON object"},
        Refusal{"string", R"("x")", "body: expected a JSON object"},
        Refusal{"rank_missing", R"({"keys":[]})", kNeedKeys},
        Refusal{"rank_null", R"({"rank":null,"keys":[]})", kNeedKeys},
        Refusal{"keys_object", R"({"rank":3,"keys":{}})", kNeedKeys},
        Refusal{"keys_null", R"({"rank":3,"keys":null})", kNeedKeys},
        Refusal{"keys_string", R"({"rank":3,"keys":"ab"})", kNeedKeys},
        Refusal{"rank_missing_bad_keys", R"({"keys":[7]})", kNeedKeys},
        Refusal{"rank_string", R"({"rank":"3","keys":[]})", "rank: expected an integer"},
        Refusal{"rank_true", R"({"rank":true,"keys":[]})", "rank: expected an integer"},
        Refusal{"rank_float", R"({"rank":1.0,"keys":[]})", "rank: expected an integer"},
        Refusal{"rank_list", R"({"rank":[1],"keys":[]})", "rank: expected an integer"},
        Refusal{"rank_2_63", R"({"rank":9223372036854775808,"keys":[]})", "rank: out of range for a 64-bit integer"},
        Refusal{"rank_huge", R"({"rank":100000000000000000000000,"keys":[]})",
                "rank: out of range for a 64-bit integer"},
        Refusal{"rank_huge_negative", R"({"rank":-9223372036854775809,"keys":[]})",
                "rank: out of range for a 64-bit integer"},
        Refusal{"bare_string", R"({"rank":3,"keys":["blk1"]})", "keys[0]: expected a [key, prefix_key] pair of strings"},
        Refusal{"two_char", R"({"rank":3,"keys":[["a",""],"ab"]})",
                "keys[1]: expected a [key, prefix_key] pair of strings"},
        Refusal{"single", R"({"rank":3,"keys":[["a",""],["b",""],["c",""],["blk1"]]})",
                "keys[3]: expected a [key, prefix_key] pair of strings"},
        Refusal{"int_key", R"({"rank":3,"keys":[7]})", "keys[0]: expected a [key, prefix_key] pair of strings"},
        Refusal{"triple", R"({"rank":3,"keys":[["a","b","c"]]})", "keys[0]: expected a [key, prefix_key] pair of strings"},
        Refusal{"null_prefix", R"({"rank":3,"keys":[["a",null]]})", "keys[0]: expected a [key, prefix_key] pair of strings"},
        Refusal{"list_key", R"({"rank":3,"keys":[[["a"],""]]})", "keys[0]: expected a [key, prefix_key] pair of strings"}),
    [](const auto& info) { return info.param.name; });

TEST(ServerDecodeTest, AllocateDefaultsAndLastMemberWins) {
  auto no_keys = decode_allocate_request(R"({"rank":3})");
  ASSERT_TRUE(no_keys);
  EXPECT_TRUE(no_keys.value().keys.empty());
  // Python's json.loads keeps the last of a repeated member.
  auto repeated = decode_allocate_request(R"({"rank":"x","rank":4,"keys":[["a",""]],"extra":1})");
  ASSERT_TRUE(repeated) << repeated.error().message;
  EXPECT_EQ(repeated.value().rank, 4);
  auto negative = decode_allocate_request(R"( {"rank": -9223372036854775808, "keys": [["", ""]]} )");
  ASSERT_TRUE(negative);
  EXPECT_EQ(negative.value().rank, std::numeric_limits<Rank>::min());
  EXPECT_EQ(negative.value().keys, (std::vector<BlockKey>{{"", ""}}));
}

class GetLocationsRequestRefusal : public ::testing::TestWithParam<Refusal> {};
TEST_P(GetLocationsRequestRefusal, Refuses) {
  auto result = decode_get_locations_request(GetParam().body);
  ASSERT_FALSE(result);
  expect_refusal(result.error(), GetParam());
}
INSTANTIATE_TEST_SUITE_P(
    Codec, GetLocationsRequestRefusal,
    ::testing::Values(Refusal{"not_object", "3", "body: expected a JSON object"},
                      Refusal{"rank_missing", R"({"keys":[]})", kNeedKeys},
                      Refusal{"rank_null", R"({"rank":null})", kNeedKeys},
                      Refusal{"keys_not_list", R"({"rank":1,"keys":"a"})", kNeedKeys},
                      Refusal{"rank_bool", R"({"rank":false,"keys":[]})", "rank: expected an integer"},
                      Refusal{"rank_out", R"({"rank":18446744073709551615})", "rank: out of range for a 64-bit integer"},
                      Refusal{"key_list", R"({"rank":1,"keys":["a",["b"]]})", "keys[1]: expected a string"},
                      Refusal{"key_null", R"({"rank":1,"keys":[null]})", "keys[0]: expected a string"}),
    [](const auto& info) { return info.param.name; });

class BatchExistsRequestRefusal : public ::testing::TestWithParam<Refusal> {};
TEST_P(BatchExistsRequestRefusal, Refuses) {
  auto result = decode_batch_exists_request(GetParam().body);
  ASSERT_FALSE(result);
  expect_refusal(result.error(), GetParam());
}
INSTANTIATE_TEST_SUITE_P(
    Codec, BatchExistsRequestRefusal,
    ::testing::Values(Refusal{"not_object", "[\"a\"]", "body: expected a JSON object"},
                      Refusal{"keys_string", R"({"keys":"a"})", "Invalid keys format"},
                      Refusal{"keys_null", R"({"keys":null})", "Invalid keys format"},
                      Refusal{"keys_object", R"({"keys":{"a":1}})", "Invalid keys format"},
                      Refusal{"key_list", R"({"keys":[["a"]]})", "keys[0]: expected a string"},
                      Refusal{"key_number", R"({"keys":["a","b",3]})", "keys[2]: expected a string"}),
    [](const auto& info) { return info.param.name; });

TEST(ServerDecodeTest, BatchExistsMissingKeysIsEmpty) {
  auto request = decode_batch_exists_request("{}");
  ASSERT_TRUE(request);
  EXPECT_TRUE(request.value().keys.empty());
}

// The reusable decoders: keys of the fast path are views into the body; keys the full parser reads
// (escapes, a repeated member, extra members) are views into `buffer`, where it parsed the body in
// place; each decode starts afresh.
bool points_into(std::string_view outer, std::string_view inner) {
  return std::less_equal<>()(outer.data(), inner.data()) &&
         std::less_equal<>()(inner.data() + inner.size(), outer.data() + outer.size());
}

TEST(ServerDecodeTest, KeyListViewsPointIntoTheBody) {
  KeyListRequest out;
  const std::string compact = R"({"rank":7,"keys":["a","bc",""]})";
  ASSERT_FALSE(decode_get_locations_request(compact, out).has_value());
  EXPECT_EQ(out.rank, 7);
  EXPECT_THAT(out.keys, ::testing::ElementsAre("a", "bc", ""));
  for (const auto key : out.keys) EXPECT_TRUE(points_into(compact, key));

  const std::string spaced = R"({"keys": ["x", "yz"]})";
  ASSERT_FALSE(decode_batch_exists_request(spaced, out).has_value());
  EXPECT_EQ(out.rank, 0);  // not left over from the previous decode
  EXPECT_THAT(out.keys, ::testing::ElementsAre("x", "yz"));
  for (const auto key : out.keys) EXPECT_TRUE(points_into(spaced, key));
}

TEST(ServerDecodeTest, KeyListEscapedKeysPointIntoItsBuffer) {
  KeyListRequest out;
  const std::string body = R"({"keys":["a","\u0062\n","caf\u00e9",""]})";
  ASSERT_FALSE(decode_batch_exists_request(body, out).has_value());
  EXPECT_THAT(out.keys, ::testing::ElementsAre("a", "b\n", "caf\xC3\xA9", ""));
  for (const auto key : out.keys) EXPECT_TRUE(points_into(out.buffer, key));

  // A later fast decode replaces them all; a full-parser one with a rank sets it; a repeated member
  // counts by its last occurrence.
  ASSERT_FALSE(decode_batch_exists_request(R"({"keys":["q"]})", out).has_value());
  EXPECT_THAT(out.keys, ::testing::ElementsAre("q"));
  ASSERT_FALSE(decode_get_locations_request(R"({"rank":-2,"keys":["\\"],"extra":null})", out).has_value());
  EXPECT_EQ(out.rank, -2);
  EXPECT_THAT(out.keys, ::testing::ElementsAre("\\"));
  ASSERT_FALSE(decode_get_locations_request(R"({"rank":4})", out).has_value());
  EXPECT_EQ(out.rank, 4);
  EXPECT_TRUE(out.keys.empty());
  ASSERT_FALSE(decode_batch_exists_request(R"({"keys":["a",1],"keys":["b","c"]})", out).has_value());
  EXPECT_THAT(out.keys, ::testing::ElementsAre("b", "c"));
}

TEST(ServerDecodeTest, KeyListRefusals) {
  const std::pair<const char*, const char*> exists_refusals[] = {
      {R"({"keys":["a",3]})", "keys[1]: expected a string"},
      {R"({"keys":"a"})", "Invalid keys format"},
      {"[]", "body: expected a JSON object"},
      {R"({"keys":["a"],})", "body: expected a JSON object (invalid JSON"},
  };
  for (const auto& [body, message] : exists_refusals) {
    KeyListRequest out;
    auto error = decode_batch_exists_request(body, out);
    ASSERT_TRUE(error.has_value()) << body;
    EXPECT_THAT(error->message, StartsWith(message)) << body;
  }
  const std::pair<const char*, const char*> locations_refusals[] = {
      {R"({"keys":["a"]})", "Invalid request format: need 'rank' and 'keys'"},
      {R"({"rank":null,"keys":[]})", "Invalid request format: need 'rank' and 'keys'"},
      {R"({"rank":1,"keys":{}})", "Invalid request format: need 'rank' and 'keys'"},
      {R"({"rank":1.5,"keys":[]})", "rank: expected an integer"},
      {R"({"rank":1,"keys":["a",null]})", "keys[1]: expected a string"},
  };
  for (const auto& [body, message] : locations_refusals) {
    KeyListRequest out;
    auto error = decode_get_locations_request(body, out);
    ASSERT_TRUE(error.has_value()) << body;
    EXPECT_EQ(error->message, message) << body;
  }
}

class ConfirmWriteRequestRefusal : public ::testing::TestWithParam<Refusal> {};
TEST_P(ConfirmWriteRequestRefusal, Refuses) {
  auto result = decode_confirm_write_request(GetParam().body);
  ASSERT_FALSE(result);
  expect_refusal(result.error(), GetParam());
}
const std::string kNeedConfirmations = "Invalid request format: need 'rank' and 'confirmations'";
INSTANTIATE_TEST_SUITE_P(
    Codec, ConfirmWriteRequestRefusal,
    ::testing::Values(
        Refusal{"not_object", "null", "body: expected a JSON object"},
        Refusal{"rank_missing", R"({"confirmations":[]})", kNeedConfirmations},
        Refusal{"rank_null", R"({"rank":null,"confirmations":[]})", kNeedConfirmations},
        Refusal{"confirmations_object", R"({"rank":0,"confirmations":{}})", kNeedConfirmations},
        Refusal{"confirmations_null", R"({"rank":0,"confirmations":null})", kNeedConfirmations},
        Refusal{"rank_string", R"({"rank":"0"})", "rank: expected an integer"},
        Refusal{"rank_float", R"({"rank":0.5})", "rank: expected an integer"},
        Refusal{"not_pair", R"({"rank":0,"confirmations":[["a"]]})",
                "confirmations[0]: expected a [key, page] pair of a string and an integer"},
        Refusal{"bare_key", R"({"rank":0,"confirmations":[["a",1],"b"]})",
                "confirmations[1]: expected a [key, page] pair of a string and an integer"},
        Refusal{"key_number", R"({"rank":0,"confirmations":[[1,1]]})",
                "confirmations[0]: expected a [key, page] pair of a string and an integer"},
        Refusal{"page_string", R"({"rank":0,"confirmations":[["a","1"]]})", "confirmations[0][1]: expected an integer"},
        Refusal{"page_bool", R"({"rank":0,"confirmations":[["a",true]]})", "confirmations[0][1]: expected an integer"},
        Refusal{"page_float", R"({"rank":0,"confirmations":[["a",1.0]]})", "confirmations[0][1]: expected an integer"},
        Refusal{"page_huge", R"({"rank":0,"confirmations":[["a",1],["b",99999999999999999999]]})",
                "confirmations[1][1]: out of range for a 64-bit integer"},
        Refusal{"release_int", R"({"rank":0,"pages_to_release":5})", "pages_to_release: expected a list of integers"},
        Refusal{"release_string", R"({"rank":0,"pages_to_release":"1"})",
                "pages_to_release: expected a list of integers"},
        Refusal{"release_zero", R"({"rank":0,"pages_to_release":0})", "pages_to_release: expected a list of integers"},
        Refusal{"release_item", R"({"rank":0,"pages_to_release":[1,2,"3"]})", "pages_to_release[2]: expected an integer"},
        Refusal{"release_float", R"({"rank":0,"pages_to_release":[1.5]})", "pages_to_release[0]: expected an integer"},
        Refusal{"release_huge", R"({"rank":0,"pages_to_release":[0,-99999999999999999999]})",
                "pages_to_release[1]: out of range for a 64-bit integer"},
        // Keyed releases (kKeyedReleaseHeader): [key, page] with a string key and an integer page.
        Refusal{"release_pair_short", R"({"rank":0,"pages_to_release":[1,["a"]]})",
                "pages_to_release[1]: expected a page (an integer) or a [key, page] pair of a string and an integer"},
        Refusal{"release_pair_long", R"({"rank":0,"pages_to_release":[["a",1,2]]})",
                "pages_to_release[0]: expected a page (an integer) or a [key, page] pair of a string and an integer"},
        Refusal{"release_pair_key_number", R"({"rank":0,"pages_to_release":[[1,1]]})",
                "pages_to_release[0]: expected a page (an integer) or a [key, page] pair of a string and an integer"},
        Refusal{"release_pair_reversed", R"({"rank":0,"pages_to_release":[[1,"a"]]})",
                "pages_to_release[0]: expected a page (an integer) or a [key, page] pair of a string and an integer"},
        Refusal{"release_object", R"({"rank":0,"pages_to_release":[{"a":1}]})",
                "pages_to_release[0]: expected a page (an integer) or a [key, page] pair of a string and an integer"},
        Refusal{"release_pair_page_string", R"({"rank":0,"pages_to_release":[["a","1"]]})",
                "pages_to_release[0][1]: expected an integer"},
        Refusal{"release_pair_page_huge", R"({"rank":0,"pages_to_release":[2,["a",99999999999999999999]]})",
                "pages_to_release[1][1]: out of range for a 64-bit integer"}),
    [](const auto& info) { return info.param.name; });

// Found by fuzz/request_decoders.cpp: RapidJSON 1.1's SSE2 in-situ scanner (on now) lets a raw
// 0x1A-0x1F through once a string is 16 bytes long. JSON and Python's json.loads refuse every
// control byte inside a string, at any offset.
TEST(ServerDecodeTest, RawControlCharactersInStringsAreRefusedAtAnyOffset) {
  for (std::size_t offset : {0, 1, 15, 16, 17, 31, 40}) {
    for (int byte = 1; byte < 0x20; ++byte) {
      const char control = static_cast<char>(byte);
      const std::string text = std::string(offset, 'a') + control + "z";
      SCOPED_TRACE(testing::Message() << "offset " << offset << ", byte " << int(control));
      EXPECT_FALSE(decode_initialize_request(R"({"num_pages":1,"note":")" + text + R"("})"));
      EXPECT_FALSE(decode_batch_exists_request(R"({"keys":[")" + text + R"("]})"));
      EXPECT_FALSE(decode_get_locations_request(R"({"rank":0,"keys":["\u0041",")" + text + R"("]})"));
      EXPECT_FALSE(decode_allocate_request(R"({"rank":0,"keys":[[")" + text + R"(","\u0041"]]})"));
      EXPECT_FALSE(decode_initialize_response(R"({"message":")" + text + R"("})"));
      EXPECT_FALSE(decode_batch_exists_response(R"({"exists":[true],"note":")" + text + R"("})", 1));
    }
  }
}

// RapidJSON's recursive SAX parser reads the full path, so the nesting is bounded (64 levels, far
// more than any message has): deeper is refused as not JSON, not a stack overflow.
TEST(ServerDecodeTest, NestingDeeperThan64LevelsIsRefusedAsNotJson) {
  const auto nested = [](int lists) { return R"({"keys": )" + std::string(lists, '[') + std::string(lists, ']') + "}"; };
  auto deepest = decode_batch_exists_request(nested(63));  // 64 levels with the root object
  ASSERT_FALSE(deepest);
  EXPECT_EQ(deepest.error().message, "keys[0]: expected a string");
  auto deeper = decode_batch_exists_request(nested(64));
  ASSERT_FALSE(deeper);
  EXPECT_EQ(deeper.error().message, "body: expected a JSON object (invalid JSON: nested deeper than 64 levels at offset 73)");
  auto answer = decode_batch_exists_response(R"({"exists":)" + std::string(100'000, '[') , 1);
  ASSERT_FALSE(answer);
  EXPECT_THAT(answer.error().message, StartsWith("answer: not JSON (nested deeper than 64 levels"));
}

// Found by fuzz/service.cpp: an empty body given as a null string_view reached memchr(nullptr, ...),
// undefined behaviour the sanitizer build reports.
TEST(ServerDecodeTest, NullEmptyBodyIsRefusedAsNotJson) {
  const std::string_view none;
  EXPECT_FALSE(decode_initialize_request(none));
  EXPECT_FALSE(decode_allocate_request(none));
  EXPECT_FALSE(decode_confirm_write_request(none));
  EXPECT_FALSE(decode_batch_exists_request(none));
  EXPECT_FALSE(decode_get_locations_request(none));
  EXPECT_FALSE(decode_initialize_response(none));
}

TEST(ServerDecodeTest, ConfirmWriteDefaults) {
  auto request = decode_confirm_write_request(R"({"rank":2})");
  ASSERT_TRUE(request);
  EXPECT_TRUE(request.value().confirmations.empty());
  EXPECT_TRUE(request.value().pages_to_release.empty());
  // vLLM's `if pages_to_release:` releases nothing for null.
  auto null_release = decode_confirm_write_request(R"({"rank":2,"confirmations":[["a",1]],"pages_to_release":null})");
  ASSERT_TRUE(null_release);
  EXPECT_TRUE(null_release.value().pages_to_release.empty());
  EXPECT_EQ(null_release.value().confirmations, (std::vector<Confirmation>{{"a", 1}}));
}

// Keyed releases: a [key, page] entry gives its page in pages_to_release and its key in
// release_keys, by index; bare pages (vLLM's) leave release_keys empty, by either decoding path.
TEST(ServerDecodeTest, ConfirmWriteKeyedReleases) {
  for (const std::string_view body :
       {R"({"rank":1,"confirmations":[["c",4]],"pages_to_release":[3,["a",5],7,["b\u00e9",-1]]})",
        R"({"rank": 1, "confirmations": [["c", 4]], "pages_to_release": [3, [ "a" , 5 ], 7, ["bé", -1]]})"}) {
    auto request = decode_confirm_write_request(body);
    ASSERT_TRUE(request) << request.error().message;
    EXPECT_EQ(request.value().rank, 1);
    EXPECT_EQ(request.value().confirmations, (std::vector<Confirmation>{{"c", 4}}));
    EXPECT_EQ(request.value().pages_to_release, (std::vector<Page>{3, 5, 7, -1}));
    EXPECT_EQ(request.value().release_keys, (std::vector<ReleaseKey>{{1, "a"}, {3, "bé"}}));
  }
  for (const std::string_view bare : {R"({"rank":1,"confirmations":[],"pages_to_release":[3,5]})",
                                      R"({"rank":1,"confirmations":[],"pages_to_release":[3,5],"x":"\u0041"})"}) {
    auto request = decode_confirm_write_request(bare);
    ASSERT_TRUE(request);
    EXPECT_EQ(request.value().pages_to_release, (std::vector<Page>{3, 5}));
    EXPECT_TRUE(request.value().release_keys.empty());
  }
  // A repeated member counts by its last occurrence, keys included.
  auto repeated = decode_confirm_write_request(
      R"({"rank":1,"pages_to_release":[["a",1]],"pages_to_release":[2]})");
  ASSERT_TRUE(repeated);
  EXPECT_EQ(repeated.value().pages_to_release, (std::vector<Page>{2}));
  EXPECT_TRUE(repeated.value().release_keys.empty());
}

// The client's encoder takes keyed releases in the shape the server's decoder gives them: what one
// sends, the other reads back, entry for entry.
TEST(RoundTripTest, ConfirmWriteKeyedReleases) {
  const std::vector<Confirmation> confirmations{{"c", 4}};
  const std::vector<Page> pages{3, 5, 7, 9};
  for (const auto& keyed : {std::vector<ReleaseKey>{}, std::vector<ReleaseKey>{{0, "a"}},
                            std::vector<ReleaseKey>{{1, "a"}, {3, "b\u00e9\"\\"}},
                            std::vector<ReleaseKey>{{0, "w"}, {1, "x"}, {2, "y"}, {3, "z"}}}) {
    auto request = decode_confirm_write_request(encode_confirm_write_request(1, confirmations, pages, keyed));
    ASSERT_TRUE(request) << request.error().message;
    EXPECT_EQ(request.value().confirmations, confirmations);
    EXPECT_EQ(request.value().pages_to_release, pages);
    EXPECT_EQ(request.value().release_keys, keyed);
  }
}

TEST(RoutesTest, TheKeyedReleaseHeaderIsNamedOnce) {
  EXPECT_EQ(kKeyedReleaseHeader, "X-Hf3fs-Keyed-Release");
}

class InitializeRequestRefusal : public ::testing::TestWithParam<Refusal> {};
TEST_P(InitializeRequestRefusal, Refuses) {
  auto result = decode_initialize_request(GetParam().body);
  ASSERT_FALSE(result);
  expect_refusal(result.error(), GetParam());
}
INSTANTIATE_TEST_SUITE_P(
    Codec, InitializeRequestRefusal,
    ::testing::Values(Refusal{"empty", "", "body: expected a JSON object (invalid JSON: ", true},
                      Refusal{"array", "[1024]", "body: expected a JSON object"},
                      Refusal{"unknown_role", R"({"num_pages":4,"role":"admin"})", "Invalid initialization parameters"},
                      Refusal{"role_case", R"({"num_pages":4,"role":"Worker"})", "Invalid initialization parameters"},
                      Refusal{"role_null", R"({"num_pages":4,"role":null})", "Invalid initialization parameters"},
                      Refusal{"role_number", R"({"num_pages":4,"role":1})", "Invalid initialization parameters"},
                      Refusal{"role_bad_pages_bad", R"({"num_pages":"x","role":"admin"})",
                              "Invalid initialization parameters"},
                      Refusal{"pages_string", R"({"num_pages":"4"})", "num_pages: expected an integer"},
                      Refusal{"pages_null", R"({"num_pages":null,"role":"worker"})", "num_pages: expected an integer"},
                      Refusal{"pages_float", R"({"num_pages":4.0})", "num_pages: expected an integer"},
                      Refusal{"pages_true", R"({"num_pages":true})", "num_pages: expected an integer"},
                      Refusal{"pages_huge", R"({"num_pages":9223372036854775808})",
                              "num_pages: out of range for a 64-bit integer"}),
    [](const auto& info) { return info.param.name; });

TEST(ServerDecodeTest, InitializeDefaultsAndScheduler) {
  auto empty = decode_initialize_request("{}");
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty.value().role, Role::worker);
  EXPECT_EQ(empty.value().num_pages, 0);
  // Values are the state's to judge: the decoder passes them through.
  auto negative = decode_initialize_request(R"({"num_pages":-5})");
  ASSERT_TRUE(negative);
  EXPECT_EQ(negative.value().num_pages, -5);
  auto big = decode_initialize_request(R"({"num_pages":9223372036854775807,"role":"worker"})");
  ASSERT_TRUE(big);
  EXPECT_EQ(big.value().num_pages, std::numeric_limits<std::int64_t>::max());
  // A scheduler's num_pages is never looked at, whatever its type.
  for (const char* body : {R"({"role":"scheduler","num_pages":"x"})", R"({"role":"scheduler","num_pages":null})",
                           R"({"role":"scheduler","num_pages":[1]})", R"({"role":"scheduler"})"}) {
    auto scheduler = decode_initialize_request(body);
    ASSERT_TRUE(scheduler) << body;
    EXPECT_EQ(scheduler.value().role, Role::scheduler);
  }
}

// ---- Common forms and their variants decode alike ----
// The decoders recognise the common compact and spaced forms directly and parse anything else with
// RapidJSON; these tests hold both routes to the same answers.

TEST(FormsTest, AllocateAnswerVariants) {
  const std::vector<BlockKey> sent{{"a", ""}, {"b", ""}};
  const std::vector<Page> expected{0, -1};
  for (const char* body : {
           R"({"rank":3,"results":[["a",0],["b",-1]]})",
           R"({"rank": 3, "results": [["a", 0], ["b", -1]]})",
           " {\n  \"results\" : [ [ \"a\" , 0 ] ,\n [\"b\",-1] ] ,\t\"rank\":3 }\r\n",
           R"({"results":[["a",0],["b",-1]]})",
           R"({"results":[["\u0061",0],["b",-1]],"rank":3})",   // an escape
           R"({"results":[["a",0],["b",-1]],"rank":3,"extra":[1,{"x":null}]})",  // another member
           R"({"results":[["x",7]],"results":[["a",0],["b",-1]]})",  // the last one counts
           R"({"rank":3.5,"results":[["a",-0],["b",-1]]})",  // rank is not checked; -0 is 0
       }) {
    auto decoded = decode_allocate_response(body, sent);
    ASSERT_TRUE(decoded) << body << ": " << decoded.error().message;
    EXPECT_EQ(decoded.value(), expected) << body;
  }
}

TEST(FormsTest, AllocateAnswerNonAsciiAndEscapedKeys) {
  const std::vector<BlockKey> sent{{"cl\xC3\xA9", ""}, {"q\"\\\n", ""}, {"", ""}};
  const std::string body = encode_allocate_response(0, sent, std::vector<Page>{1, 2, 3});
  auto decoded = decode_allocate_response(body, sent);
  ASSERT_TRUE(decoded) << decoded.error().message;
  EXPECT_EQ(decoded.value(), (std::vector<Page>{1, 2, 3}));
}

TEST(FormsTest, AllocateAnswerNumbersAtTheEdges) {
  const std::vector<BlockKey> sent{{"a", ""}};
  EXPECT_EQ(decode_allocate_response(R"({"results":[["a",9223372036854775807]]})", sent).value()[0],
            std::numeric_limits<Page>::max());
  EXPECT_EQ(decode_allocate_response(R"({"results":[["a",123456789012345678]]})", sent).value()[0],
            123456789012345678);
  for (const char* body : {R"({"results":[["a",9223372036854775808]]})", R"({"results":[["a",1e2]]})",
                           R"({"results":[["a",1.0]]})", R"({"results":[["a",-2]]})"}) {
    auto decoded = decode_allocate_response(body, sent);
    ASSERT_FALSE(decoded) << body;
    EXPECT_EQ(decoded.error().message, "results[0]: page must be an integer >= -1") << body;
  }
  for (const char* body : {R"({"results":[["a",01]]})", R"({"results":[["a",+1]]})", R"({"results":[["a",-]]})",
                           R"({"results":[["a",0]]}x)", R"({"results":[["a",0]])"}) {
    auto decoded = decode_allocate_response(body, sent);
    ASSERT_FALSE(decoded) << body;
    EXPECT_THAT(decoded.error().message, StartsWith("answer: not JSON (")) << body;
  }
  auto nul = decode_allocate_response(std::string_view("{\"results\":[[\"a\",0]]}\0", 23), sent);
  ASSERT_FALSE(nul);
  EXPECT_EQ(nul.error().message, "answer: not JSON (NUL byte at offset 21)");
  auto bad_utf8 = decode_allocate_response("{\"results\":[[\"\xC3\x28\",0]]}", sent);
  ASSERT_FALSE(bad_utf8);
  EXPECT_EQ(bad_utf8.error().message, "answer: not JSON (invalid UTF-8 at offset 14)");
}

TEST(FormsTest, ExistsAndLocationsAnswerVariants) {
  for (const char* body : {R"({"exists":[true,false,true]})", R"({"exists": [true, false, true]})",
                           R"({"exists":[true,false,true],"exists2":1})", R"({"exists":[false],"exists":[true,false,true]})",
                           "{\"exists\":[\ntrue,false , true\n]}"}) {
    auto decoded = decode_batch_exists_response(body, 3);
    ASSERT_TRUE(decoded) << body << ": " << decoded.error().message;
    EXPECT_EQ(decoded.value(), (std::vector<bool>{true, false, true})) << body;
  }
  EXPECT_EQ(decode_batch_exists_response(R"({"exists":[true,fals]})", 2).error().message.substr(0, 17),
            "answer: not JSON ");
  EXPECT_EQ(decode_batch_exists_response(R"({"exists":[true,"false"]})", 2).error().message,
            "exists[1]: expected a boolean");
  const std::vector<std::optional<Page>> expected{0, std::nullopt, 17};
  for (const char* body : {R"({"locations":[0,null,17]})", R"({"locations": [0, null, 17]})",
                           R"({"locations":[0,null,17],"x":"y"})", R"({"locations":[-0,null,1.7e1]})"}) {
    auto decoded = decode_get_locations_response(body, 3);
    if (std::string_view(body).find("1.7e1") != std::string_view::npos) {
      ASSERT_FALSE(decoded);
      EXPECT_EQ(decoded.error().message, "locations[2]: expected an integer or null");
      continue;
    }
    ASSERT_TRUE(decoded) << body << ": " << decoded.error().message;
    EXPECT_EQ(decoded.value(), expected) << body;
  }
}

TEST(FormsTest, ServerRequestVariants) {
  const AllocateRequest expected{3, {{"k", ""}, {"j", "p"}}};
  for (const char* body : {
           R"({"rank":3,"keys":[["k",""],["j","p"]]})",
           R"({"rank": 3, "keys": [["k", ""], ["j", "p"]]})",  // vLLM's client
           R"({"keys":[["k",""],["j","p"]],"rank":3})",
           R"({"rank":0,"rank":3,"keys":[["k",""],["j","p"]]})",  // the last one counts
           R"({"rank":3,"keys":[["\u006b",""],["j","p"]]})",
           R"({"rank":3,"keys":[["k",""],["j","p"]],"extra":true})",
       }) {
    auto decoded = decode_allocate_request(body);
    ASSERT_TRUE(decoded) << body << ": " << decoded.error().message;
    EXPECT_EQ(decoded.value().rank, expected.rank) << body;
    EXPECT_EQ(decoded.value().keys, expected.keys) << body;
  }
  for (const char* body : {R"({"rank":3,"confirmations":[["k",1],["j",2]],"pages_to_release":[4,-5]})",
                           R"({"pages_to_release": [4, -5], "confirmations": [["k", 1], ["j", 2]], "rank": 3})",
                           R"({"rank":3,"confirmations":[["k",1],["j",2]],"pages_to_release":[4,-5],"pages_to_release":[4,-5]})"}) {
    auto decoded = decode_confirm_write_request(body);
    ASSERT_TRUE(decoded) << body << ": " << decoded.error().message;
    EXPECT_EQ(decoded.value().rank, 3);
    EXPECT_EQ(decoded.value().confirmations, (std::vector<Confirmation>{{"k", 1}, {"j", 2}}));
    EXPECT_EQ(decoded.value().pages_to_release, (std::vector<Page>{4, -5}));
  }
  for (const char* body : {R"({"keys":["a","b"]})", R"({"keys": ["a", "b"]})", R"({"keys":["a","\u0062"]})",
                           R"({"rank":1,"keys":["a","b"]})"}) {
    auto exists = decode_batch_exists_request(body);
    ASSERT_TRUE(exists) << body;
    EXPECT_EQ(exists.value().keys, (std::vector<std::string>{"a", "b"}));
  }
  for (const char* body : {R"({"rank":1,"keys":["a","b"]})", R"({"keys": ["a", "b"], "rank": 1})"}) {
    auto locations = decode_get_locations_request(body);
    ASSERT_TRUE(locations) << body;
    EXPECT_EQ(locations.value().rank, 1);
    EXPECT_EQ(locations.value().keys, (std::vector<std::string>{"a", "b"}));
  }
  // Refusals are the same whichever route would have read the body.
  EXPECT_EQ(decode_allocate_request(R"({"rank": 3, "keys": [["k", ""], ["j"]]})").error().message,
            "keys[1]: expected a [key, prefix_key] pair of strings");
  EXPECT_EQ(decode_allocate_request(R"({"rank":01,"keys":[]})").error().message.substr(0, 28),
            "body: expected a JSON object");
  EXPECT_EQ(decode_get_locations_request(R"({"rank":1,"keys":["a",1]})").error().message, "keys[1]: expected a string");
}

// Random keys of every kind (plain, escaped, non-ASCII) through encode and decode, compact and with
// a repeated member (which forces the full parser): the same values come back.
TEST(FormsTest, RandomRoundTrips) {
  std::uint64_t seed = 12345;
  const auto next = [&seed] {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<std::uint32_t>(seed >> 33);
  };
  const std::string alphabet[] = {"a", "Z", "0", " ", "\"", "\\", "/", "\n", "\t", std::string(1, '\x01'),
                                  "\x7f", "\xC3\xA9", "\xE2\x80\x94", "\xF0\x9F\x98\x80"};
  const auto random_key = [&] {
    std::string key;
    const std::uint32_t length = next() % 40;
    for (std::uint32_t i = 0; i < length; ++i) key += alphabet[next() % std::size(alphabet)];
    return key;
  };
  for (int round = 0; round < 300; ++round) {
    std::vector<BlockKey> keys;
    std::vector<std::string> names;
    std::vector<Page> pages;
    std::vector<Confirmation> confirmations;
    const std::uint32_t n = next() % 20;
    for (std::uint32_t i = 0; i < n; ++i) {
      keys.push_back({random_key() + std::to_string(i), random_key()});
      names.push_back(keys.back().key);
      const Page page = static_cast<Page>(next()) - (std::int64_t{1} << 31);
      pages.push_back(page < -1 ? -page : page);
      confirmations.push_back({keys.back().key, static_cast<Page>(next()) * (next() % 2 ? -1 : 1) * 1000003});
    }
    const Rank rank = static_cast<Rank>(next()) - 100;
    const std::string allocate = encode_allocate_request(rank, keys);
    const std::string repeated = "{\"rank\":0," + allocate.substr(1);
    for (const std::string& body : {allocate, repeated}) {
      auto request = decode_allocate_request(body);
      ASSERT_TRUE(request) << body << ": " << request.error().message;
      EXPECT_EQ(request.value().rank, rank);
      EXPECT_EQ(request.value().keys, keys);
    }
    auto answer = decode_allocate_response(encode_allocate_response(rank, keys, pages), keys);
    ASSERT_TRUE(answer) << answer.error().message;
    for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(answer.value()[i], (pages[i]));

    auto confirm = decode_confirm_write_request(encode_confirm_write_request(rank, confirmations, pages));
    ASSERT_TRUE(confirm) << confirm.error().message;
    EXPECT_EQ(confirm.value().confirmations, confirmations);
    EXPECT_EQ(confirm.value().pages_to_release, pages);

    const std::string exists = encode_batch_exists_request(names);
    for (const std::string& body : {exists, "{\"keys\":[]," + exists.substr(1)}) {
      auto request = decode_batch_exists_request(body);
      ASSERT_TRUE(request) << body;
      EXPECT_EQ(request.value().keys, names);
    }
    auto locations = decode_get_locations_request(encode_get_locations_request(rank, names));
    ASSERT_TRUE(locations);
    EXPECT_EQ(locations.value().keys, names);
  }
}

TEST(FormsTest, LargeBatchesWithLongestNumbers) {
  // Every integer at its longest: the encoders' size bounds are exact enough.
  std::vector<Confirmation> confirmations;
  std::vector<Page> release;
  for (int i = 0; i < 1000; ++i) {
    confirmations.push_back({std::string(i % 50, 'k') + std::to_string(i), std::numeric_limits<Page>::min()});
    release.push_back(std::numeric_limits<Page>::min());
  }
  const std::string body = encode_confirm_write_request(std::numeric_limits<Rank>::min(), confirmations, release);
  std::string expected = "{\"rank\":-9223372036854775808,\"confirmations\":[";
  for (std::size_t i = 0; i < confirmations.size(); ++i) {
    expected += (i ? ",[\"" : "[\"") + confirmations[i].key + "\",-9223372036854775808]";
  }
  expected += "],\"pages_to_release\":[";
  for (std::size_t i = 0; i < release.size(); ++i) expected += (i ? ",-9223372036854775808" : "-9223372036854775808");
  expected += "]}";
  EXPECT_EQ(body, expected);
  auto decoded = decode_confirm_write_request(body);
  ASSERT_TRUE(decoded);
  EXPECT_EQ(decoded.value().confirmations, confirmations);

  const std::vector<std::optional<Page>> locations(1000, std::numeric_limits<Page>::min());
  std::string expected_locations = "{\"locations\":[";
  for (std::size_t i = 0; i < locations.size(); ++i) expected_locations += (i ? ",-9223372036854775808" : "-9223372036854775808");
  EXPECT_EQ(encode_get_locations_response(locations), expected_locations + "]}");
  std::string expected_exists = "{\"exists\":[";
  for (int i = 0; i < 1000; ++i) expected_exists += (i ? ",false" : "false");
  EXPECT_EQ(encode_batch_exists_response(std::vector<bool>(1000, false)), expected_exists + "]}");
  std::vector<BlockKey> keys;
  std::string expected_results = "{\"rank\":-9223372036854775808,\"results\":[";
  for (int i = 0; i < 1000; ++i) {
    keys.push_back({"k\"" + std::to_string(i), ""});
    expected_results += (i ? ",[\"k\\\"" : "[\"k\\\"") + std::to_string(i) + "\",-9223372036854775808]";
  }
  EXPECT_EQ(encode_allocate_response(std::numeric_limits<Rank>::min(), keys,
                                     std::vector<Page>(1000, std::numeric_limits<Page>::min())),
            expected_results + "]}");
}

// ---- Path rank ----

TEST(PathRankTest, PlainDecimalOnly) {
  EXPECT_EQ(parse_path_rank("3"), 3);
  EXPECT_EQ(parse_path_rank("0"), 0);
  EXPECT_EQ(parse_path_rank("-0"), 0);
  EXPECT_EQ(parse_path_rank("-12"), -12);
  EXPECT_EQ(parse_path_rank("007"), 7);
  EXPECT_EQ(parse_path_rank("9223372036854775807"), std::numeric_limits<Rank>::max());
  EXPECT_EQ(parse_path_rank("-9223372036854775808"), std::numeric_limits<Rank>::min());
  for (std::string_view bad : {"", "-", "+5", " 7", "7 ", "1_0", "10**23", "abc", "1.0", "0x10", "1e3",
                               "9223372036854775808", "-9223372036854775809", "--1", "3a", "\xD9\xA3"}) {
    EXPECT_EQ(parse_path_rank(bad), std::nullopt) << bad;
  }
}

}  // namespace
}  // namespace hf3fs_meta::protocol
