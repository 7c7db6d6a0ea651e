// The SDK's answer decoders and its error classifier on arbitrary answers. The first byte sets how
// many results the call expects (the allocate decoder is given keys "k0", "k1", ... as sent); the
// rest is the body. Whatever a decoder accepts must be a JSON object holding exactly what it
// returned, as RapidJSON reads it; and each decoder must give the same outcome with its fast path
// and without it (RapidJSON's SAX reader alone).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.hpp"
#include "hf3fs_meta/protocol.hpp"

namespace {

using namespace hf3fs_meta;
using namespace hf3fs_meta::fuzz;
using rapidjson::Value;

// The list answer's field, of `count` elements, each accepted by `element(value, index)`.
template <class Element>
void check_list(std::string_view body, std::string_view field, std::size_t count, Element element) {
  rapidjson::Document doc;
  HF3FS_FUZZ_CHECK(parse_object(body, doc));
  const Value* list = find_member(doc, field);
  HF3FS_FUZZ_CHECK(list && list->IsArray() && list->Size() == count);
  for (rapidjson::SizeType i = 0; i < count; ++i) HF3FS_FUZZ_CHECK(element((*list)[i], i));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t expected = data[0] % 16;
  const std::string_view body = as_text(data + 1, size - 1);

  if (auto message = protocol::decode_initialize_response(body)) {
    rapidjson::Document doc;
    HF3FS_FUZZ_CHECK(parse_object(body, doc));
    const Value* value = find_member(doc, "message");
    HF3FS_FUZZ_CHECK(value && is_string(*value, message.value()));
  }

  std::vector<BlockKey> sent;
  for (std::size_t i = 0; i < expected; ++i) sent.push_back({std::string("k").append(std::to_string(i)), "p"});
  if (auto results = protocol::decode_allocate_response(body, sent)) {
    const auto& got = results.value();
    HF3FS_FUZZ_CHECK(got.size() == expected);
    check_list(body, "results", expected, [&](const Value& pair, std::size_t i) {
      return pair.IsArray() && pair.Size() == 2 && is_string(pair[0], sent[i].key) && is_int64(&pair[1], got[i]) &&
             got[i] >= kNoPage;
    });
  }

  if (auto exists = protocol::decode_batch_exists_response(body, expected)) {
    const auto& got = exists.value();
    HF3FS_FUZZ_CHECK(got.size() == expected);
    check_list(body, "exists", expected,
               [&](const Value& v, std::size_t i) { return v.IsBool() && v.GetBool() == got[i]; });
  }

  if (auto locations = protocol::decode_get_locations_response(body, expected)) {
    const auto& got = locations.value();
    HF3FS_FUZZ_CHECK(got.size() == expected);
    check_list(body, "locations", expected, [&](const Value& v, std::size_t i) {
      return got[i] ? is_int64(&v, *got[i]) : v.IsNull();
    });
  }

  check_fast_path_agrees([&] { return protocol::decode_allocate_response(body, sent); });
  check_fast_path_agrees([&] { return protocol::decode_batch_exists_response(body, expected); });
  check_fast_path_agrees([&] { return protocol::decode_get_locations_response(body, expected); });

  // Any non-2xx status with the body as given: always a server-side error class, never one the
  // client reserves for itself (refused before sending, transport failures).
  const int status = 300 + static_cast<int>(data[0]) * 2;
  const auto classified = protocol::classify_error(status, "application/json", body);
  HF3FS_FUZZ_CHECK(classified.code != errc::invalid_argument && classified.code != errc::connection_failed &&
                   classified.code != errc::timeout && classified.code != errc::protocol_error);
  HF3FS_FUZZ_CHECK(!to_string(classified.code).empty());
  return 0;
}
