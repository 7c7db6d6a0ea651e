// classify_error over every error docs/protocol.md lists, and the variants a real server or proxy sends.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "hf3fs_meta/protocol_server.hpp"

namespace hf3fs_meta::protocol {
namespace {

constexpr std::string_view kJson = "application/json";
constexpr std::string_view kText = "text/plain; charset=utf-8";

struct Case {
  std::string name;
  int status;
  std::string_view content_type;
  std::string body;
  errc code;
  std::string detail;
  std::string prefix;
  std::string cause;
  std::optional<Rank> rank;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::string detail_body(std::string_view detail) { return encode_detail(detail); }

class ClassifyTest : public ::testing::TestWithParam<Case> {};

TEST_P(ClassifyTest, Classifies) {
  const Case& c = GetParam();
  const ClassifiedError e = classify_error(c.status, c.content_type, c.body);
  EXPECT_EQ(e.code, c.code) << to_string(e.code);
  EXPECT_EQ(e.detail, c.detail);
  EXPECT_EQ(e.prefix, c.prefix);
  EXPECT_EQ(e.cause, c.cause);
  EXPECT_EQ(e.rank, c.rank);
}

const std::string kPydantic1 =
    R"j({"detail": [{"loc": ["path", "rank"], "msg": "value is not a valid integer", "type": "type_error.integer"}]})j";
const std::string kPydantic2 =
    R"j({"detail": [{"type": "int_parsing", "loc": ["path", "rank"], "msg": "Input should be a valid integer, unable to parse string as an integer", "input": "abc"}]})j";
const std::string kTwoErrors =
    R"j({"detail":[{"loc":["body","keys",3],"msg":"field required"},{"loc":["path","rank"],"msg":"bad"}]})j";
const std::string kLongHtml = "<html><head><title>502 Bad Gateway</title></head><body>" + std::string(300, 'x') +
                              "</body></html>";

const Case kCases[] = {
    // 400: vLLM's own texts and the reference server's field-naming refusals.
    {"format_keys", 400, kJson, detail_body("Invalid request format: need 'rank' and 'keys'"), errc::invalid_request,
     "Invalid request format: need 'rank' and 'keys'", "", "Invalid request format: need 'rank' and 'keys'",
     std::nullopt},
    {"format_confirmations", 400, kJson, detail_body("Invalid request format: need 'rank' and 'confirmations'"),
     errc::invalid_request, "Invalid request format: need 'rank' and 'confirmations'", "",
     "Invalid request format: need 'rank' and 'confirmations'", std::nullopt},
    {"keys_format", 400, kJson, R"j({"detail": "Invalid keys format"})j", errc::invalid_request, "Invalid keys format",
     "", "Invalid keys format", std::nullopt},
    {"init_params", 400, kJson, R"j({"detail": "Invalid initialization parameters"})j", errc::invalid_initialization,
     "Invalid initialization parameters", "", "Invalid initialization parameters", std::nullopt},
    {"init_params_max", 400, kJson,
     detail_body("Invalid initialization parameters: num_pages 99999999 is above the maximum 16777216"),
     errc::invalid_initialization, "Invalid initialization parameters: num_pages 99999999 is above the maximum 16777216",
     "", "Invalid initialization parameters: num_pages 99999999 is above the maximum 16777216", std::nullopt},
    {"field_naming", 400, kJson, detail_body("keys[3]: expected a [key, prefix_key] pair of strings"),
     errc::invalid_request, "keys[3]: expected a [key, prefix_key] pair of strings", "",
     "keys[3]: expected a [key, prefix_key] pair of strings", std::nullopt},
    {"400_not_json", 400, kText, "Bad Request", errc::invalid_request, "Bad Request", "", "Bad Request",
     std::nullopt},

    // 500: rank not initialized, whatever the call.
    {"alloc_rank", 500, kJson, R"j({"detail": "Allocation failed: Rank 3 not initialized"})j",
     errc::rank_not_initialized, "Allocation failed: Rank 3 not initialized", "Allocation failed",
     "Rank 3 not initialized", 3},
    {"locations_rank", 500, kJson, R"j({"detail":"Failed to get key locations: Rank 4 not initialized"})j",
     errc::rank_not_initialized, "Failed to get key locations: Rank 4 not initialized", "Failed to get key locations",
     "Rank 4 not initialized", 4},
    {"exists_rank", 500, kJson, R"j({"detail":"Key existence check failed: Rank 5 not initialized"})j",
     errc::rank_not_initialized, "Key existence check failed: Rank 5 not initialized", "Key existence check failed",
     "Rank 5 not initialized", 5},
    {"confirm_rank_text", 500, kJson, R"j({"detail":"Confirmation failed: Rank 6 not initialized"})j",
     errc::rank_not_initialized, "Confirmation failed: Rank 6 not initialized", "Confirmation failed",
     "Rank 6 not initialized", 6},
    {"negative_rank", 500, kJson, R"j({"detail":"Allocation failed: Rank -2 not initialized"})j",
     errc::rank_not_initialized, "Allocation failed: Rank -2 not initialized", "Allocation failed",
     "Rank -2 not initialized", -2},
    {"int64_max_rank", 500, kJson, R"j({"detail":"Allocation failed: Rank 9223372036854775807 not initialized"})j",
     errc::rank_not_initialized, "Allocation failed: Rank 9223372036854775807 not initialized", "Allocation failed",
     "Rank 9223372036854775807 not initialized", INT64_MAX},
    {"huge_rank", 500, kJson, R"j({"detail":"Allocation failed: Rank 99999999999999999999999 not initialized"})j",
     errc::rank_not_initialized, "Allocation failed: Rank 99999999999999999999999 not initialized",
     "Allocation failed", "Rank 99999999999999999999999 not initialized", std::nullopt},
    {"huge_negative_rank", 500, kJson, R"j({"detail":"Allocation failed: Rank -9223372036854775809 not initialized"})j",
     errc::rank_not_initialized, "Allocation failed: Rank -9223372036854775809 not initialized", "Allocation failed",
     "Rank -9223372036854775809 not initialized", std::nullopt},
    {"rank_true", 500, kJson, R"j({"detail":"Allocation failed: Rank True not initialized"})j",
     errc::rank_not_initialized, "Allocation failed: Rank True not initialized", "Allocation failed",
     "Rank True not initialized", 1},
    {"rank_float", 500, kJson, R"j({"detail":"Failed to get key locations: Rank 1.0 not initialized"})j",
     errc::rank_not_initialized, "Failed to get key locations: Rank 1.0 not initialized",
     "Failed to get key locations", "Rank 1.0 not initialized", 1},
    {"rank_fraction", 500, kJson, R"j({"detail":"Allocation failed: Rank 1.5 not initialized"})j",
     errc::rank_not_initialized, "Allocation failed: Rank 1.5 not initialized", "Allocation failed",
     "Rank 1.5 not initialized", std::nullopt},
    {"rank_word", 500, kJson, R"j({"detail":"Allocation failed: Rank abc not initialized"})j",
     errc::rank_not_initialized, "Allocation failed: Rank abc not initialized", "Allocation failed",
     "Rank abc not initialized", std::nullopt},
    {"no_prefix_rank", 500, kJson, R"j({"detail":"Rank 7 not initialized"})j", errc::rank_not_initialized,
     "Rank 7 not initialized", "", "Rank 7 not initialized", 7},
    {"unknown_prefix_rank", 500, kJson, R"j({"detail":"Eviction failed: Rank 8 not initialized"})j",
     errc::rank_not_initialized, "Eviction failed: Rank 8 not initialized", "Eviction failed",
     "Rank 8 not initialized", 8},
    {"confirm_keyerror", 500, kJson, R"j({"detail": "Confirmation failed: 9"})j", errc::rank_not_initialized,
     "Confirmation failed: 9", "Confirmation failed", "9", 9},
    {"confirm_keyerror_negative", 500, kJson, R"j({"detail": "Confirmation failed: -1"})j",
     errc::rank_not_initialized, "Confirmation failed: -1", "Confirmation failed", "-1", -1},
    {"confirm_keyerror_huge", 500, kJson, R"j({"detail": "Confirmation failed: 123456789012345678901234"})j",
     errc::rank_not_initialized, "Confirmation failed: 123456789012345678901234", "Confirmation failed",
     "123456789012345678901234", std::nullopt},
    {"bare_integer_other_prefix", 500, kJson, R"j({"detail": "Allocation failed: 9"})j", errc::allocation_failed,
     "Allocation failed: 9", "Allocation failed", "9", std::nullopt},

    // 500: other causes, by prefix.
    {"alloc_unpack", 500, kJson, R"j({"detail":"Allocation failed: too many values to unpack (expected 2)"})j",
     errc::allocation_failed, "Allocation failed: too many values to unpack (expected 2)", "Allocation failed",
     "too many values to unpack (expected 2)", std::nullopt},
    {"alloc_non_iterable", 500, kJson, R"j({"detail":"Allocation failed: cannot unpack non-iterable int object"})j",
     errc::allocation_failed, "Allocation failed: cannot unpack non-iterable int object", "Allocation failed",
     "cannot unpack non-iterable int object", std::nullopt},
    {"confirm_unpack", 500, kJson,
     R"j({"detail":"Confirmation failed: not enough values to unpack (expected 2, got 1)"})j",
     errc::confirmation_failed, "Confirmation failed: not enough values to unpack (expected 2, got 1)",
     "Confirmation failed", "not enough values to unpack (expected 2, got 1)", std::nullopt},
    {"confirm_not_iterable", 500, kJson, R"j({"detail":"Confirmation failed: 'int' object is not iterable"})j",
     errc::confirmation_failed, "Confirmation failed: 'int' object is not iterable", "Confirmation failed",
     "'int' object is not iterable", std::nullopt},
    {"exists_unhashable", 500, kJson, R"j({"detail":"Key existence check failed: unhashable type: 'list'"})j",
     errc::existence_check_failed, "Key existence check failed: unhashable type: 'list'",
     "Key existence check failed", "unhashable type: 'list'", std::nullopt},
    {"locations_other", 500, kJson, R"j({"detail":"Failed to get key locations: unhashable type: 'dict'"})j",
     errc::location_lookup_failed, "Failed to get key locations: unhashable type: 'dict'",
     "Failed to get key locations", "unhashable type: 'dict'", std::nullopt},
    {"unknown_prefix", 500, kJson, R"j({"detail":"Eviction failed: disk full"})j", errc::server_error,
     "Eviction failed: disk full", "", "Eviction failed: disk full", std::nullopt},
    {"no_colon", 500, kJson, R"j({"detail":"something broke"})j", errc::server_error, "something broke", "",
     "something broke", std::nullopt},
    {"text_plain_500", 500, kText, "Internal Server Error", errc::server_error, "Internal Server Error", "",
     "Internal Server Error", std::nullopt},
    {"empty_detail", 500, kJson, R"j({"detail":""})j", errc::server_error, R"j({"detail":""})j", "",
     R"j({"detail":""})j", std::nullopt},
    {"no_detail", 500, kJson, R"j({"error":"x"})j", errc::server_error, R"j({"error":"x"})j", "", R"j({"error":"x"})j",
     std::nullopt},
    {"detail_number", 500, kJson, R"j({"detail":42})j", errc::server_error, R"j({"detail":42})j", "",
     R"j({"detail":42})j", std::nullopt},
    {"detail_object", 500, kJson, R"j({"detail":{"a":"Allocation failed: Rank 3 not initialized"}})j",
     errc::server_error, R"j({"detail":{"a":"Allocation failed: Rank 3 not initialized"}})j", "",
     R"j({"detail":{"a":"Allocation failed: Rank 3 not initialized"}})j", std::nullopt},
    {"json_array_body", 500, kJson, R"j(["Allocation failed: Rank 3 not initialized"])j", errc::server_error,
     R"j(["Allocation failed: Rank 3 not initialized"])j", "", R"j(["Allocation failed: Rank 3 not initialized"])j",
     std::nullopt},
    {"empty_body_500", 500, kJson, "", errc::server_error, "", "", "", std::nullopt},

    // 409 from the reference server.
    {"stale", 409, kJson, detail_body("Confirmation failed: page 5 of key k1 is not allocated on rank 2"),
     errc::stale_allocation, "Confirmation failed: page 5 of key k1 is not allocated on rank 2",
     "Confirmation failed", "page 5 of key k1 is not allocated on rank 2", 2},
    {"conflict", 409, kJson, detail_body("Confirmation failed: page 5 of key k1 is mapped to key k0 on rank -3"),
     errc::stale_allocation, "Confirmation failed: page 5 of key k1 is mapped to key k0 on rank -3",
     "Confirmation failed", "page 5 of key k1 is mapped to key k0 on rank -3", -3},
    {"409_no_rank", 409, kJson, detail_body("Confirmation failed: conflict"), errc::stale_allocation,
     "Confirmation failed: conflict", "Confirmation failed", "conflict", std::nullopt},

    // 422 in both pydantic shapes.
    {"pydantic1", 422, kJson, kPydantic1, errc::validation_error, "path.rank: value is not a valid integer", "",
     "path.rank: value is not a valid integer", std::nullopt},
    {"pydantic2", 422, kJson, kPydantic2, errc::validation_error,
     "path.rank: Input should be a valid integer, unable to parse string as an integer", "",
     "path.rank: Input should be a valid integer, unable to parse string as an integer", std::nullopt},
    {"pydantic_two_errors", 422, kJson, kTwoErrors, errc::validation_error,
     "body.keys.3: field required; path.rank: bad", "", "body.keys.3: field required; path.rank: bad",
     std::nullopt},
    {"422_empty_list", 422, kJson, R"j({"detail":[]})j", errc::validation_error, R"j({"detail":[]})j", "",
     R"j({"detail":[]})j", std::nullopt},
    {"422_string", 422, kJson, R"j({"detail":"bad path"})j", errc::validation_error, "bad path", "", "bad path",
     std::nullopt},

    // Gateways and everything else.
    {"502_html", 502, "text/html", kLongHtml, errc::unavailable, kLongHtml.substr(0, 200) + "...", "",
     kLongHtml.substr(0, 200) + "...", std::nullopt},
    {"503_json", 503, kJson, R"j({"detail":"Service Unavailable"})j", errc::unavailable, "Service Unavailable", "",
     "Service Unavailable", std::nullopt},
    {"503_empty", 503, kText, "", errc::unavailable, "", "", "", std::nullopt},
    {"504", 504, kText, "Gateway Timeout", errc::unavailable, "Gateway Timeout", "", "Gateway Timeout",
     std::nullopt},
    {"404", 404, kJson, R"j({"detail":"Not Found"})j", errc::unexpected_status, "Not Found", "", "Not Found",
     std::nullopt},
    {"405", 405, kJson, R"j({"detail":"Method Not Allowed"})j", errc::unexpected_status, "Method Not Allowed", "",
     "Method Not Allowed", std::nullopt},
    {"307", 307, "", "", errc::unexpected_status, "", "", "", std::nullopt},
    {"413", 413, kText, "Request Entity Too Large", errc::unexpected_status, "Request Entity Too Large", "",
     "Request Entity Too Large", std::nullopt},
    {"501", 501, kJson, R"j({"detail":"Allocation failed: Rank 3 not initialized"})j", errc::unexpected_status,
     "Allocation failed: Rank 3 not initialized", "Allocation failed", "Rank 3 not initialized", std::nullopt},
};

INSTANTIATE_TEST_SUITE_P(Protocol, ClassifyTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return info.param.name; });

TEST(ClassifyRawTest, TruncationKeepsUtf8Whole) {
  // 199 ASCII bytes, then a 2-byte character straddling the 200-byte cut.
  // (append, not operator+ on a temporary string: GCC 12 warns falsely on that, -Warray-bounds)
  const std::string body = std::string(199, 'a').append("\xC3\xA9").append(50, 'b');
  const ClassifiedError e = classify_error(502, "text/html", body);
  EXPECT_EQ(e.detail, std::string(199, 'a').append("..."));
}

TEST(ClassifyRawTest, ExactlyTwoHundredBytesIsKept) {
  const std::string body(200, 'z');
  EXPECT_EQ(classify_error(502, "text/html", body).detail, body);
}

TEST(ClassifyRawTest, JsonDetailIsNotTruncated) {
  const std::string cause(500, 'c');
  const ClassifiedError e = classify_error(500, kJson, encode_detail("Allocation failed: " + cause));
  EXPECT_EQ(e.code, errc::allocation_failed);
  EXPECT_EQ(e.cause, cause);
}

TEST(ClassifyRawTest, ContentTypeDoesNotDecide) {
  // A proxy that labels FastAPI's JSON as text still carries vLLM's detail.
  const ClassifiedError e = classify_error(500, kText, R"j({"detail":"Allocation failed: Rank 3 not initialized"})j");
  EXPECT_EQ(e.code, errc::rank_not_initialized);
  EXPECT_EQ(e.rank, 3);
}

TEST(ClassifyRawTest, EscapedAndNonAsciiDetail) {
  const ClassifiedError e =
      classify_error(500, kJson, R"j({"detail":"Allocation failed: key \"k\u00e9\" \u2014 bad"})j");
  EXPECT_EQ(e.code, errc::allocation_failed);
  EXPECT_EQ(e.cause, "key \"k\xC3\xA9\" \xE2\x80\x94 bad");
}

// Only a 503 whose JSON detail starts with kNotLeaderDetailPrefix is a member that is not
// the leader (it applied nothing); the same words in another status, or in a body that is no JSON
// detail (a proxy's page), are not.
TEST(ClassifyRawTest, NotTheLeaderIsA503WhoseDetailSaysSo) {
  const ClassifiedError standby = classify_error(503, kJson, encode_detail("not the leader: nothing applied"));
  EXPECT_EQ(standby.code, errc::unavailable);
  EXPECT_TRUE(standby.not_leader);
  EXPECT_EQ(standby.detail, "not the leader: nothing applied");
  EXPECT_TRUE(classify_error(503, kJson, encode_detail("not the leader")).not_leader);
  EXPECT_FALSE(classify_error(502, kJson, encode_detail("not the leader: nothing applied")).not_leader);
  EXPECT_FALSE(classify_error(500, kJson, encode_detail("not the leader: nothing applied")).not_leader);
  EXPECT_FALSE(classify_error(503, kText, "not the leader: nothing applied").not_leader);
  EXPECT_FALSE(classify_error(503, kJson, encode_detail("the data dir failed: nothing applied")).not_leader);
  EXPECT_FALSE(classify_error(503, kJson, encode_detail("Not the leader")).not_leader);
}

}  // namespace
}  // namespace hf3fs_meta::protocol
