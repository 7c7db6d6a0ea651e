// The rows of docs/protocol.md's "vLLM's defects" and "Deviations" as raw HTTP requests and the
// answers the reference server gives them, each sent after WireTest's set-up (contract_wire_test.cpp):
// ranks 0 and 1 with 8 pages each, "done" complete on both (page 0), "pending" allocated on rank 0
// (page 1). contract_wire_test checks the server's answers against them; proxy_wire_test sends them
// through hf3fs-meta-proxy too.
#pragma once

#include <string>

namespace hf3fs_meta::contract {

struct Row {
  const char* name;
  const char* target;
  std::string body;
  int status;
  std::string answer;        // the whole body (a JSON detail unless `whole`), or its start
  bool prefix = false;       // `answer` is the start of the detail
  bool whole = false;        // `answer` is the whole body, not a detail
};

inline std::string detail_body(const std::string& detail) { return R"({"detail":")" + detail + R"("})"; }

inline std::string validation_body(const std::string& input) {
  return R"({"detail":[{"type":"int_parsing","loc":["path","rank"],)"
         R"("msg":"Input should be a valid integer, unable to parse string as an integer","input":")" +
         input + R"("}]})";
}

inline constexpr const char* kAllocate = "/keys/batch_allocate";
inline constexpr const char* kConfirm = "/keys/confirm_write";
inline constexpr const char* kExists = "/keys/batch_exists";
inline constexpr const char* kLocations = "/keys/get_locations";
inline const std::string kPair = "keys[0]: expected a [key, prefix_key] pair of strings";
inline const std::string kNeedKeys = "Invalid request format: need 'rank' and 'keys'";
inline const std::string kNeedConfirmations = "Invalid request format: need 'rank' and 'confirmations'";
inline const std::string kBadInit = "Invalid initialization parameters";
inline const std::string kNotObject = "body: expected a JSON object";

// docs/protocol.md, "vLLM's defects" (those the reference server must not copy): each is refused
// with a 400 that names the field, and nothing changes (deviations table, first row).
inline const Row kDefectRows[] = {
    // allocate with a malformed key: vLLM answers 500 and loses the pages taken before it.
    {"AllocateBareStringKey", kAllocate, R"({"rank":0,"keys":["blk1"]})", 400, kPair},
    {"AllocateOneElementKey", kAllocate, R"({"rank":0,"keys":[["blk1"]]})", 400, kPair},
    {"AllocateIntegerKey", kAllocate, R"({"rank":0,"keys":[7]})", 400, kPair},
    {"AllocateTwoCharacterStringKey", kAllocate, R"({"rank":0,"keys":["ab"]})", 400, kPair},
    {"AllocateThreeElementKey", kAllocate, R"({"rank":0,"keys":[["x","","z"]]})", 400, kPair},
    {"AllocateIntegerPrefixKey", kAllocate, R"({"rank":0,"keys":[["x",5]]})", 400, kPair},
    {"AllocateMalformedKeyAfterGoodOnes", kAllocate, R"({"rank":0,"keys":[["x",""],["y",""],"blk1"]})", 400,
     "keys[2]: expected a [key, prefix_key] pair of strings"},
    // the same key twice in one batch: vLLM loses the other page.
    {"AllocateSameKeyTwice", kAllocate, R"({"rank":0,"keys":[["x",""],["y",""],["x",""]]})", 400,
     "keys[2]: duplicate key 'x' (also keys[0])"},
    // pages_to_release outside 0..num_pages-1, or strings: vLLM puts them in the pool.
    {"ReleasePageAboveTheRange", kConfirm, R"({"rank":0,"confirmations":[],"pages_to_release":[99]})", 400,
     "pages_to_release[0]: page 99 is outside 0..7 on rank 0"},
    {"ReleaseNegativePage", kConfirm, R"({"rank":0,"confirmations":[],"pages_to_release":[-5]})", 400,
     "pages_to_release[0]: page -5 is outside 0..7 on rank 0"},
    {"ReleaseStringPage", kConfirm, R"({"rank":0,"confirmations":[],"pages_to_release":["3"]})", 400,
     "pages_to_release[0]: expected an integer"},
    {"ReleaseOutOfRangeAfterAValidConfirmation", kConfirm,
     R"({"rank":0,"confirmations":[["pending",1]],"pages_to_release":[2,8]})", 400,
     "pages_to_release[1]: page 8 is outside 0..7 on rank 0"},
    // a confirmation naming a page outside 0..num_pages-1: vLLM accepts it.
    {"ConfirmPageAboveTheRange", kConfirm, R"({"rank":0,"confirmations":[["k",8]]})", 400,
     "confirmations[0]: page 8 is outside 0..7 on rank 0"},
    {"ConfirmNegativePage", kConfirm, R"({"rank":0,"confirmations":[["pending",1],["k",-1]]})", 400,
     "confirmations[1]: page -1 is outside 0..7 on rank 0"},
    {"ConfirmStringPage", kConfirm, R"({"rank":0,"confirmations":[["pending","1"]]})", 400,
     "confirmations[0][1]: expected an integer"},
    // "rank": true / 1.0 (vLLM: rank 1), worker "num_pages": true (vLLM: 1 page).
    {"AllocateRankTrue", kAllocate, R"({"rank":true,"keys":[["x",""]]})", 400, "rank: expected an integer"},
    {"AllocateRankOnePointZero", kAllocate, R"({"rank":1.0,"keys":[["x",""]]})", 400, "rank: expected an integer"},
    {"ConfirmRankTrue", kConfirm, R"({"rank":true,"confirmations":[["done",0]]})", 400, "rank: expected an integer"},
    {"GetLocationsRankOnePointZero", kLocations, R"({"rank":1.0,"keys":["done"]})", 400,
     "rank: expected an integer"},
    {"InitializeNumPagesTrue", "/rank/2/initialize", R"({"num_pages":true})", 400, "num_pages: expected an integer"},
    {"InitializeNumPagesString", "/rank/2/initialize", R"({"num_pages":"8"})", 400, "num_pages: expected an integer"},
    {"InitializeNumPagesNull", "/rank/2/initialize", R"({"num_pages":null})", 400, "num_pages: expected an integer"},
    {"InitializeNumPagesFloat", "/rank/2/initialize", R"({"num_pages":8.0})", 400, "num_pages: expected an integer"},
    // a body that is not a JSON object: vLLM answers 500 in text/plain.
    {"AllocateBodyNotJson", kAllocate, "not json", 400, kNotObject + " (invalid JSON: ", true},
    {"AllocateBodyEmpty", kAllocate, "", 400, kNotObject + " (invalid JSON: ", true},
    {"AllocateBodyArray", kAllocate, "[]", 400, kNotObject},
    {"ConfirmBodyString", kConfirm, R"("text")", 400, kNotObject},
    {"ExistsBodyNull", kExists, "null", 400, kNotObject},
    {"GetLocationsBodyNumber", kLocations, "42", 400, kNotObject},
    {"InitializeBodyArray", "/rank/2/initialize", "[8]", 400, kNotObject},
    {"InitializeBodyNotJson", "/rank/2/initialize", "{num_pages: 8}", 400, kNotObject + " (invalid JSON: ", true},
    // a huge worker num_pages: vLLM builds a list that size.
    {"InitializeHugeNumPages", "/rank/2/initialize", R"({"num_pages":1000000000})", 400,
     kBadInit + ": num_pages 1000000000 is above the maximum 16777216"},
    {"InitializeHugerNumPages", "/rank/2/initialize", R"({"num_pages":1000000000000})", 400,
     kBadInit + ": num_pages 1000000000000 is above the maximum 16777216"},
    {"InitializeHugeNumPagesOnAnExistingRank", "/rank/0/initialize", R"({"num_pages":16777217})", 400,
     kBadInit + ": num_pages 16777217 is above the maximum 16777216"},
};

// docs/protocol.md, "Deviations": the rows that refuse, and the
// requests where vLLM already answers 400 (its exact text).
inline const Row kDeviationRows[] = {
    {"AllocateRankMissing", kAllocate, R"({"keys":[["x",""]]})", 400, kNeedKeys},
    {"AllocateRankNull", kAllocate, R"({"rank":null,"keys":[["x",""]]})", 400, kNeedKeys},
    {"AllocateKeysNotAList", kAllocate, R"({"rank":0,"keys":"x"})", 400, kNeedKeys},
    {"GetLocationsRankMissing", kLocations, R"({"keys":["done"]})", 400, kNeedKeys},
    {"GetLocationsKeysNotAList", kLocations, R"({"rank":0,"keys":{"done":1}})", 400, kNeedKeys},
    {"GetLocationsKeyNotAString", kLocations, R"({"rank":0,"keys":["done",1]})", 400, "keys[1]: expected a string"},
    {"ConfirmRankMissing", kConfirm, R"({"confirmations":[["pending",1]]})", 400, kNeedConfirmations},
    {"ConfirmRankNull", kConfirm, R"({"rank":null,"confirmations":[]})", 400, kNeedConfirmations},
    {"ConfirmConfirmationsNotAList", kConfirm, R"({"rank":0,"confirmations":5})", 400, kNeedConfirmations},
    {"ConfirmConfirmationNotAPair", kConfirm, R"({"rank":0,"confirmations":[["pending",1],["k"]]})", 400,
     "confirmations[1]: expected a [key, page] pair of a string and an integer"},
    {"ConfirmReleasesNotAList", kConfirm, R"({"rank":0,"confirmations":[["pending",1]],"pages_to_release":5})", 400,
     "pages_to_release: expected a list of integers"},
    {"ExistsKeysNotAList", kExists, R"({"keys":"done"})", 400, "Invalid keys format"},
    {"ExistsKeyThatIsAList", kExists, R"({"keys":[["done"]]})", 400, "keys[0]: expected a string"},
    {"InitializeZeroPages", "/rank/2/initialize", R"({"num_pages":0})", 400, kBadInit},
    {"InitializeNegativePages", "/rank/2/initialize", R"({"num_pages":-3,"role":"worker"})", 400, kBadInit},
    {"InitializeNumPagesMissing", "/rank/2/initialize", "{}", 400, kBadInit},
    {"InitializeUnknownRole", "/rank/2/initialize", R"({"num_pages":8,"role":"admin"})", 400, kBadInit},
    {"InitializeRoleNull", "/rank/2/initialize", R"({"num_pages":8,"role":null})", 400, kBadInit},
    // A JSON rank outside 64 bits, or of another type.
    {"AllocateRankAbove64Bits", kAllocate, R"({"rank":9223372036854775808,"keys":[["x",""]]})", 400,
     "rank: out of range for a 64-bit integer"},
    {"GetLocationsRankBelow64Bits", kLocations, R"({"rank":-9223372036854775809,"keys":["done"]})", 400,
     "rank: out of range for a 64-bit integer"},
    {"ConfirmRankFarAbove64Bits", kConfirm, R"({"rank":1e30,"confirmations":[["pending",1]]})", 400,
     "rank: out of range for a 64-bit integer"},
    {"AllocateRankString", kAllocate, R"({"rank":"0","keys":[["x",""]]})", 400, "rank: expected an integer"},
    // The same page named by two different keys in one confirm_write.
    {"ConfirmSamePageForTwoKeys", kConfirm, R"({"rank":0,"confirmations":[["pending",1],["other",1]]})", 409,
     "Confirmation failed: page 1 of key other is mapped to key pending on rank 0"},
    // A page that is free on that rank.
    {"ConfirmFreePage", kConfirm, R"({"rank":0,"confirmations":[["pending",1],["k",5]]})", 409,
     "Confirmation failed: page 5 of key k is not allocated on rank 0"},
    // A page allocated for another key and not yet confirmed (a stale confirm after a restart).
    {"ConfirmAPageAllocatedForAnotherKey", kConfirm, R"({"rank":0,"confirmations":[["other",1]]})", 409,
     "Confirmation failed: page 1 of key other was allocated for another key on rank 0"},
    // A page that another key maps to on that rank.
    {"ConfirmAnotherKeysPage", kConfirm, R"({"rank":0,"confirmations":[["pending",1],["other",0]]})", 409,
     "Confirmation failed: page 0 of key other is mapped to key done on rank 0"},
    {"ConfirmAnotherKeysPageOnTheSecondRank", kConfirm, R"({"rank":1,"confirmations":[["x",0]]})", 409,
     "Confirmation failed: page 0 of key x is mapped to key done on rank 1"},
    // confirm_write on a rank not initialized, with any confirmation or release.
    {"ConfirmOnARankNotInitialized", kConfirm, R"({"rank":7,"confirmations":[["x",0]]})", 500,
     "Confirmation failed: 7"},
    {"ReleaseOnARankNotInitialized", kConfirm, R"({"rank":7,"confirmations":[],"pages_to_release":[0]})", 500,
     "Confirmation failed: 7"},
    {"ConfirmAndReleaseOnARankNotInitialized", kConfirm,
     R"({"rank":7,"confirmations":[["x",0]],"pages_to_release":[1]})", 500, "Confirmation failed: 7"},
    // A path rank that is not a plain decimal 64-bit integer: FastAPI's pydantic-2 body.
    {"PathRankWithPlusSign", "/rank/+5/initialize", R"({"num_pages":8})", 422, validation_body("+5"), false, true},
    {"PathRankWithUnderscore", "/rank/1_0/initialize", R"({"num_pages":8})", 422, validation_body("1_0"), false,
     true},
    {"PathRankPowerExpression", "/rank/10**23/initialize", R"({"num_pages":8})", 422, validation_body("10**23"),
     false, true},
    {"PathRankWithEncodedSpace", "/rank/%207/initialize", R"({"num_pages":8})", 422, validation_body(" 7"), false,
     true},
    {"PathRankAbove64Bits", "/rank/9223372036854775808/initialize", R"({"num_pages":8})", 422,
     validation_body("9223372036854775808"), false, true},
    {"PathRankNotANumber", "/rank/abc/initialize", R"({"num_pages":8})", 422, validation_body("abc"), false, true},
};

}  // namespace hf3fs_meta::contract
