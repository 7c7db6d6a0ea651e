// The server's request decoders on arbitrary bodies, checked against RapidJSON's reading of the same
// bytes: whatever a decoder accepts (by whichever path inside the codec) must be a JSON object whose
// members, read as Python's json.loads would (the last of a repeated name), hold exactly what the
// decoder returned. The reusable decoders must agree with the owning ones, and every decoder must
// give the same outcome with its fast path and without it (RapidJSON's SAX reader alone).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.hpp"
#include "hf3fs_meta/protocol_server.hpp"

namespace {

using namespace hf3fs_meta;
using namespace hf3fs_meta::fuzz;
using rapidjson::Value;

// `list` (absent: nothing) holds exactly `keys`, as strings.
template <class Keys>
void check_keys(const Value* list, const Keys& keys) {
  if (!list) return HF3FS_FUZZ_CHECK(keys.empty());
  HF3FS_FUZZ_CHECK(list->IsArray() && list->Size() == keys.size());
  for (rapidjson::SizeType i = 0; i < list->Size(); ++i) HF3FS_FUZZ_CHECK(is_string((*list)[i], keys[i]));
}

void check_initialize(std::string_view body, bool json, const rapidjson::Document& doc) {
  auto decoded = protocol::decode_initialize_request(body);
  if (!decoded) return HF3FS_FUZZ_CHECK(!decoded.error().message.empty());
  HF3FS_FUZZ_CHECK(json);
  const Value* role = find_member(doc, "role");
  if (decoded.value().role == Role::scheduler) return HF3FS_FUZZ_CHECK(role && is_string(*role, "scheduler"));
  HF3FS_FUZZ_CHECK(!role || is_string(*role, "worker"));
  const Value* num_pages = find_member(doc, "num_pages");
  HF3FS_FUZZ_CHECK(num_pages ? is_int64(num_pages, decoded.value().num_pages) : decoded.value().num_pages == 0);
}

void check_allocate(std::string_view body, bool json, const rapidjson::Document& doc) {
  auto decoded = protocol::decode_allocate_request(body);
  if (!decoded) return HF3FS_FUZZ_CHECK(!decoded.error().message.empty());
  HF3FS_FUZZ_CHECK(json && is_int64(find_member(doc, "rank"), decoded.value().rank));
  const auto& keys = decoded.value().keys;
  const Value* list = find_member(doc, "keys");
  if (!list) return HF3FS_FUZZ_CHECK(keys.empty());
  HF3FS_FUZZ_CHECK(list->IsArray() && list->Size() == keys.size());
  for (rapidjson::SizeType i = 0; i < list->Size(); ++i) {
    const Value& pair = (*list)[i];
    HF3FS_FUZZ_CHECK(pair.IsArray() && pair.Size() == 2);
    HF3FS_FUZZ_CHECK(is_string(pair[0], keys[i].key) && is_string(pair[1], keys[i].prefix_key));
  }
}

void check_confirm_write(std::string_view body, bool json, const rapidjson::Document& doc) {
  auto decoded = protocol::decode_confirm_write_request(body);
  if (!decoded) return HF3FS_FUZZ_CHECK(!decoded.error().message.empty());
  const auto& request = decoded.value();
  HF3FS_FUZZ_CHECK(json && is_int64(find_member(doc, "rank"), request.rank));
  const Value* confirmations = find_member(doc, "confirmations");
  if (!confirmations) {
    HF3FS_FUZZ_CHECK(request.confirmations.empty());
  } else {
    HF3FS_FUZZ_CHECK(confirmations->IsArray() && confirmations->Size() == request.confirmations.size());
    for (rapidjson::SizeType i = 0; i < confirmations->Size(); ++i) {
      const Value& pair = (*confirmations)[i];
      HF3FS_FUZZ_CHECK(pair.IsArray() && pair.Size() == 2);
      HF3FS_FUZZ_CHECK(is_string(pair[0], request.confirmations[i].key));
      HF3FS_FUZZ_CHECK(is_int64(&pair[1], request.confirmations[i].page));
    }
  }
  const Value* release = find_member(doc, "pages_to_release");
  if (!release || release->IsNull()) return HF3FS_FUZZ_CHECK(request.pages_to_release.empty());
  HF3FS_FUZZ_CHECK(release->IsArray() && release->Size() == request.pages_to_release.size());
  // A bare page, or a keyed release [key, page] whose key is in release_keys at its index, in order.
  std::size_t keyed = 0;
  for (rapidjson::SizeType i = 0; i < release->Size(); ++i) {
    const Value& entry = (*release)[i];
    if (!entry.IsArray()) {
      HF3FS_FUZZ_CHECK(is_int64(&entry, request.pages_to_release[i]));
      continue;
    }
    HF3FS_FUZZ_CHECK(entry.Size() == 2 && keyed < request.release_keys.size());
    HF3FS_FUZZ_CHECK(request.release_keys[keyed].index == i && is_string(entry[0], request.release_keys[keyed].key));
    HF3FS_FUZZ_CHECK(is_int64(&entry[1], request.pages_to_release[i]));
    ++keyed;
  }
  HF3FS_FUZZ_CHECK(keyed == request.release_keys.size());
}

// The reusable decoder (views) and the owning one give the same answer, and both match RapidJSON.
template <class Owning>
void check_key_list(std::string_view body, bool json, const rapidjson::Document& doc,
                    std::optional<protocol::DecodeError> (*reuse)(std::string_view, protocol::KeyListRequest&),
                    Owning owning) {
  static protocol::KeyListRequest views;  // reused across inputs, as the server reuses it
  const auto error = reuse(body, views);
  auto decoded = owning(body);
  HF3FS_FUZZ_CHECK(error.has_value() == !decoded);
  if (error) return HF3FS_FUZZ_CHECK(!error->message.empty() && error->message == decoded.error().message);
  HF3FS_FUZZ_CHECK(json);
  check_keys(find_member(doc, "keys"), views.keys);
  check_keys(find_member(doc, "keys"), decoded.value().keys);
  if constexpr (requires { decoded.value().rank; }) {
    HF3FS_FUZZ_CHECK(is_int64(find_member(doc, "rank"), views.rank));
    HF3FS_FUZZ_CHECK(decoded.value().rank == views.rank);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view body = as_text(data, size);
  rapidjson::Document doc;
  const bool json = parse_object(body, doc);
  check_initialize(body, json, doc);
  check_allocate(body, json, doc);
  check_confirm_write(body, json, doc);
  check_key_list(body, json, doc, &protocol::decode_batch_exists_request,
                 [](std::string_view b) { return protocol::decode_batch_exists_request(b); });
  check_key_list(body, json, doc, &protocol::decode_get_locations_request,
                 [](std::string_view b) { return protocol::decode_get_locations_request(b); });
  // POST /keys/status takes POST /keys/delete's body (batch_exists' list), refused alike.
  check_key_list(body, json, doc, &protocol::decode_key_status_request,
                 [](std::string_view b) { return protocol::decode_batch_exists_request(b); });
  check_fast_path_agrees([&] { return protocol::decode_allocate_request(body); });
  check_fast_path_agrees([&] { return protocol::decode_confirm_write_request(body); });
  check_fast_path_agrees([&] { return protocol::decode_batch_exists_request(body); });
  check_fast_path_agrees([&] { return protocol::decode_get_locations_request(body); });
  return 0;
}
