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
#include "hf3fs_meta/routes.hpp"

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

// A member that is a count (a non-negative integer) equal to `value`.
bool is_count(const Value& object, const char* name, std::int64_t value) {
  const Value* v = find_member(object, name);
  return v && value >= 0 && is_int64(v, value);
}

// A "ranks" member: a list of exactly these integers.
bool is_ranks(const Value& object, const std::vector<Rank>& ranks) {
  const Value* list = find_member(object, "ranks");
  if (!list || !list->IsArray() || list->Size() != ranks.size()) return false;
  for (rapidjson::SizeType i = 0; i < list->Size(); ++i) {
    if (!is_int64(&(*list)[i], ranks[i])) return false;
  }
  return true;
}

// The namespaces' answers (docs/protocol.md, "Namespaces"), read back with RapidJSON.
void check_namespace_answers(std::string_view body, std::size_t expected) {
  if (auto all = protocol::decode_namespaces_response(body)) {
    check_list(body, "namespaces", all.value().size(), [&](const Value& v, std::size_t i) {
      const NamespaceSummary& n = all.value()[i];
      const Value* name = v.IsObject() ? find_member(v, "name") : nullptr;
      return name && is_string(*name, n.name) && valid_namespace_name(n.name) && is_ranks(v, n.ranks) &&
             is_count(v, "pages", n.pages) && is_count(v, "keys", static_cast<std::int64_t>(n.keys));
    });
  }
  if (auto dropped = protocol::decode_drop_namespace_response(body, "m1")) {
    rapidjson::Document doc;
    HF3FS_FUZZ_CHECK(parse_object(body, doc));
    const Value* name = find_member(doc, "namespace");
    const Value* flag = find_member(doc, "dropped");
    const NamespaceDropOutcome& d = dropped.value();
    HF3FS_FUZZ_CHECK(name && is_string(*name, "m1") && flag && flag->IsBool() && flag->GetBool() == d.dropped);
    HF3FS_FUZZ_CHECK(is_count(doc, "ranks", static_cast<std::int64_t>(d.ranks)) && is_count(doc, "pages", d.pages) &&
                     is_count(doc, "keys_removed", static_cast<std::int64_t>(d.keys_removed)));
  }
  if (auto status = protocol::decode_key_status_response(body, expected)) {
    const KeyStatusAnswer& a = status.value();
    HF3FS_FUZZ_CHECK(a.status.size() == expected);
    rapidjson::Document doc;
    HF3FS_FUZZ_CHECK(parse_object(body, doc));
    HF3FS_FUZZ_CHECK(is_count(doc, "ranks_initialized", static_cast<std::int64_t>(a.ranks_initialized)));
    check_list(body, "status", expected, [&](const Value& v, std::size_t i) {
      if (!a.status[i]) return v.IsNull();
      const KeyStatus& k = *a.status[i];
      const Value* complete = v.IsObject() ? find_member(v, "complete") : nullptr;
      return complete && complete->IsBool() && complete->GetBool() == k.complete && is_ranks(v, k.ranks) &&
             is_count(v, "tp_world_size", k.tp_world_size);
    });
  }
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

  check_namespace_answers(body, expected);

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
