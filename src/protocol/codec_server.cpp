// The server's half of the wire codec (codec.cpp says how the codec is written): the strict
// decoders of the requests, and the answers, byte for byte as FastAPI renders them. Part of
// hf3fs_meta::service, beside Service.
#include "hf3fs_meta/protocol_server.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "protocol/codec_support.hpp"

namespace hf3fs_meta::protocol {

using namespace detail;  // the codec's own shared pieces (codec_support.hpp)

namespace {

// vLLM's own 400 texts, answered verbatim.
constexpr std::string_view kNeedRankAndKeys = "Invalid request format: need 'rank' and 'keys'";
constexpr std::string_view kNeedRankAndConfirmations =
    "Invalid request format: need 'rank' and 'confirmations'";
constexpr std::string_view kInvalidKeysFormat = "Invalid keys format";
constexpr std::string_view kInvalidInitialization = "Invalid initialization parameters";

// "field: expected an integer" / "field: out of range for a 64-bit integer", or "" if fine.
std::string int64_error(IntCheck check, std::string field) {
  switch (check) {
    case IntCheck::ok: return {};
    case IntCheck::out_of_range: return field + ": out of range for a 64-bit integer";
    case IntCheck::not_integer: break;
  }
  return field + ": expected an integer";
}

template <class V>
std::optional<DecodeError> check_int64(const V& value, std::string field, std::int64_t& out) {
  std::string error = int64_error(read_int64(value, out), std::move(field));
  if (error.empty()) return std::nullopt;
  return refuse(std::move(error));
}

// The request body as the server requires it: a JSON object (initialize's DOM decoder).
std::optional<DecodeError> parse_object(ParsedJson& json, std::string_view body) {
  if (!json.parse(body)) return refuse("body: expected a JSON object (invalid JSON: " + json.error_text() + ")");
  if (!json.root().IsObject()) return refuse("body: expected a JSON object");
  return std::nullopt;
}

// The same judgement of what read_object saw, for the SAX decoders.
std::optional<DecodeError> object_error(const internal::ReadResult& read) {
  if (!read.not_json.empty()) return refuse("body: expected a JSON object (invalid JSON: " + read.not_json + ")");
  if (!read.object) return refuse("body: expected a JSON object");
  return std::nullopt;
}

template <std::size_t N>
int index_of(const std::string_view (&names)[N], std::string_view name) {
  for (std::size_t i = 0; i < N; ++i) {
    if (names[i] == name) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

std::string encode_drop_response(Rank rank, const DropOutcome& outcome) {
  std::string out = "{\"rank\":";
  append_int(out, rank);
  out += outcome.dropped ? ",\"dropped\":true,\"pages\":" : ",\"dropped\":false,\"pages\":";
  append_int(out, outcome.pages);
  out += ",\"mappings\":";
  append_int(out, static_cast<std::int64_t>(outcome.mappings));
  out += ",\"keys_removed\":";
  append_int(out, static_cast<std::int64_t>(outcome.keys_removed));
  out += '}';
  return out;
}

// ---- Server side: strict request decoders ----

namespace {

// Fast paths for the forms clients send (ours compact, vLLM's with spaces), with plain ASCII keys:
// they only recognise requests the full decoders below accept, with the same result, and return
// nullopt for anything else.
using internal::JsonCursor;

bool plain_string_list(JsonCursor& c, std::vector<std::string_view>& out) {
  return c.list([&](std::size_t) {
    std::string_view key;
    if (!c.plain_string(key)) return false;
    out.push_back(key);
    return true;
  });
}

std::optional<AllocateRequest> fast_allocate_request(std::string_view body) {
  static constexpr std::string_view kNames[] = {"rank", "keys"};
  AllocateRequest request;
  bool has_rank = false;
  JsonCursor c(body);
  const bool ok = c.object(kNames, [&](std::size_t index) {
    if (index == 0) return has_rank = c.integer(request.rank);
    request.keys.reserve(body.size() / 40);
    return c.list([&](std::size_t) {
      std::string_view key;
      std::string_view prefix;
      if (!c.pair([&] { return c.plain_string(key); }, [&] { return c.plain_string(prefix); })) return false;
      request.keys.push_back(BlockKey{std::string(key), std::string(prefix)});
      return true;
    });
  });
  if (!ok || !has_rank || !c.at_end()) return std::nullopt;
  return request;
}

std::optional<ConfirmWriteRequest> fast_confirm_write_request(std::string_view body) {
  static constexpr std::string_view kNames[] = {"rank", "confirmations", "pages_to_release"};
  ConfirmWriteRequest request;
  bool has_rank = false;
  JsonCursor c(body);
  const bool ok = c.object(kNames, [&](std::size_t index) {
    if (index == 0) return has_rank = c.integer(request.rank);
    if (index == 2) {
      return c.list([&](std::size_t) {
        Page page = 0;
        if (!c.integer(page)) return false;
        request.pages_to_release.push_back(page);
        return true;
      });
    }
    return c.list([&](std::size_t) {
      std::string_view key;
      Page page = 0;
      if (!c.pair([&] { return c.plain_string(key); }, [&] { return c.integer(page); })) return false;
      request.confirmations.push_back(Confirmation{std::string(key), page});
      return true;
    });
  });
  if (!ok || !has_rank || !c.at_end()) return std::nullopt;
  return request;
}

// These two fill `out` with views into the body; false leaves it partly filled.
bool fast_batch_exists_request(std::string_view body, KeyListRequest& out) {
  static constexpr std::string_view kNames[] = {"keys"};
  JsonCursor c(body);
  const bool ok = c.object(kNames, [&](std::size_t) {
    out.keys.reserve(body.size() / 35);
    return plain_string_list(c, out.keys);
  });
  return ok && c.at_end();
}

bool fast_get_locations_request(std::string_view body, KeyListRequest& out) {
  static constexpr std::string_view kNames[] = {"rank", "keys"};
  bool has_rank = false;
  JsonCursor c(body);
  const bool ok = c.object(kNames, [&](std::size_t index) {
    if (index == 0) return has_rank = c.integer(out.rank);
    out.keys.reserve(body.size() / 35);
    return plain_string_list(c, out.keys);
  });
  return ok && has_rank && c.at_end();
}


// keys: [[key, prefix_key], ...], pairs of strings.
class AllocateRequestSink : public SinkBase {
 public:
  static constexpr std::string_view kNames[] = {"rank", "keys"};
  explicit AllocateRequestSink(std::vector<BlockKey>& out) : out_(out) {}
  int field(std::string_view name) const { return index_of(kNames, name); }
  void value(int f, const Scalar& s) {
    members[f].start(s);
    if (f == 1) out_.clear();
  }
  void element(int, std::size_t index, const Scalar& s) {
    pair_.start(s);
    if (s.kind != Kind::array) pair_error(index);
  }
  void item(int, std::size_t, std::size_t position, const Scalar& s) { pair_.item(position, s); }
  void element_end(int, std::size_t index, std::size_t count) {
    if (members[1].failed()) return;
    if (!pair_.is_pair(count) || pair_.first.kind != Kind::string || pair_.second.kind != Kind::string) {
      return pair_error(index);
    }
    out_.push_back(BlockKey{std::string(pair_.first.string), std::string(pair_.second.string)});
  }

  Member members[2];  // rank, keys

 private:
  void pair_error(std::size_t index) {
    members[1].fail(indexed("keys", index) + ": expected a [key, prefix_key] pair of strings");
  }
  std::vector<BlockKey>& out_;
  Pair pair_;
};

// confirmations: [[key, page], ...]; pages_to_release: [page or [key, page], ...].
class ConfirmWriteRequestSink : public SinkBase {
 public:
  static constexpr std::string_view kNames[] = {"rank", "confirmations", "pages_to_release"};
  explicit ConfirmWriteRequestSink(ConfirmWriteRequest& out) : out_(out) {}
  int field(std::string_view name) const { return index_of(kNames, name); }
  void value(int f, const Scalar& s) {
    members[f].start(s);
    if (f == 1) out_.confirmations.clear();
    if (f == 2) {
      out_.pages_to_release.clear();
      out_.release_keys.clear();
    }
  }
  void element(int f, std::size_t index, const Scalar& s) {
    if (f == 0) return;  // "rank" as a list: refused by its own check
    pair_.start(s);
    if (f == 1) {
      if (s.kind != Kind::array) pair_error(index);
      return;
    }
    if (s.kind == Kind::array) return;  // a keyed release: judged at its end
    if (s.kind == Kind::object) return release_pair_error(index);
    Page page = 0;
    const IntCheck check = read_int64(s, page);
    if (check != IntCheck::ok) return members[2].fail(int64_error(check, indexed("pages_to_release", index)));
    out_.pages_to_release.push_back(page);
  }
  void item(int, std::size_t, std::size_t position, const Scalar& s) { pair_.item(position, s); }
  void element_end(int f, std::size_t index, std::size_t count) {
    const bool release = f == 2;
    if (f == 0 || members[f].failed() || (release && pair_.kind != Kind::array)) return;
    if (!pair_.is_pair(count) || pair_.first.kind != Kind::string) {
      return release ? release_pair_error(index) : pair_error(index);
    }
    Page page = 0;
    const IntCheck check = read_int64(pair_.second, page);
    if (check != IntCheck::ok) return members[f].fail(int64_error(check, indexed(kNames[f], index) + "[1]"));
    if (release) {
      out_.release_keys.push_back(ReleaseKey{index, std::string(pair_.first.string)});
      out_.pages_to_release.push_back(page);
      return;
    }
    out_.confirmations.push_back(Confirmation{std::string(pair_.first.string), page});
  }

  Member members[3];  // rank, confirmations, pages_to_release

 private:
  void pair_error(std::size_t index) {
    members[1].fail(indexed("confirmations", index) + ": expected a [key, page] pair of a string and an integer");
  }
  void release_pair_error(std::size_t index) {
    members[2].fail(indexed("pages_to_release", index) +
                    ": expected a page (an integer) or a [key, page] pair of a string and an integer");
  }
  ConfirmWriteRequest& out_;
  Pair pair_;
};

// keys: [key, ...], strings viewed in place; with `with_rank`, also "rank".
class KeyListSink : public SinkBase {
 public:
  static constexpr std::string_view kNames[] = {"keys", "rank"};
  KeyListSink(KeyListRequest& out, bool with_rank) : out_(out), fields_(with_rank ? 2 : 1) {}
  int field(std::string_view name) const {
    const int f = index_of(kNames, name);
    return f < fields_ ? f : -1;
  }
  void value(int f, const Scalar& s) {
    members[f].start(s);
    if (f == 0) out_.keys.clear();
  }
  void element(int, std::size_t index, const Scalar& s) {
    if (members[0].failed()) return;
    if (s.kind != Kind::string) return members[0].fail(indexed("keys", index) + ": expected a string");
    out_.keys.push_back(s.string);
  }

  Member members[2];  // keys, rank

 private:
  KeyListRequest& out_;
  int fields_;
};

// vLLM's `rank is None or not isinstance(keys, list)` test (allocate, get_locations).
bool lacks_rank_or_list(const Member& rank, const Member& list) {
  return !rank.present || rank.value.kind == Kind::null || (list.present && !list.is_list());
}

void clear(KeyListRequest& out) {
  out.rank = 0;
  out.keys.clear();
}

template <class Request>
Decoded<Request> owning(std::optional<DecodeError> error, const KeyListRequest& views) {
  if (error) return std::move(*error);
  Request request;
  if constexpr (requires { request.rank; }) request.rank = views.rank;
  request.keys.assign(views.keys.begin(), views.keys.end());
  return request;
}

}  // namespace

Decoded<InitializeRequest> decode_initialize_request(std::string_view body) {
  ParsedJson json;
  if (auto error = parse_object(json, body)) return std::move(*error);
  InitializeRequest request;
  // vLLM compares the role with "scheduler", then "worker": anything else (null, a number) is 400.
  if (const Value* role = find_member(json.root(), "role")) {
    const std::string_view name = role->IsString() ? string_of(*role) : std::string_view();
    if (name == "scheduler") {
      request.role = Role::scheduler;
      return request;  // num_pages is never looked at, whatever its type
    }
    if (name != "worker") return refuse(std::string(kInvalidInitialization));
  }
  if (const Value* num_pages = find_member(json.root(), "num_pages")) {
    if (auto error = check_int64(*num_pages, "num_pages", request.num_pages)) return std::move(*error);
  }
  return request;
}

Decoded<AllocateRequest> decode_allocate_request(std::string_view body) {
  if (auto fast = fast_allocate_request(body)) return std::move(*fast);
  AllocateRequest request;
  request.keys.reserve(body.size() / 40);
  AllocateRequestSink sink(request.keys);
  internal::ScratchBuffer scratch;
  if (auto error = object_error(internal::read_object(body, scratch.get(), sink))) return std::move(*error);
  const auto& [rank, keys] = sink.members;
  if (lacks_rank_or_list(rank, keys)) return refuse(std::string(kNeedRankAndKeys));
  if (auto error = check_int64(rank.value, "rank", request.rank)) return std::move(*error);
  if (keys.failed()) return refuse(keys.error);
  return request;
}

Decoded<ConfirmWriteRequest> decode_confirm_write_request(std::string_view body) {
  if (auto fast = fast_confirm_write_request(body)) return std::move(*fast);
  ConfirmWriteRequest request;
  ConfirmWriteRequestSink sink(request);
  internal::ScratchBuffer scratch;
  if (auto error = object_error(internal::read_object(body, scratch.get(), sink))) return std::move(*error);
  const auto& [rank, confirmations, release] = sink.members;
  if (lacks_rank_or_list(rank, confirmations)) return refuse(std::string(kNeedRankAndConfirmations));
  if (auto error = check_int64(rank.value, "rank", request.rank)) return std::move(*error);
  if (confirmations.failed()) return refuse(confirmations.error);
  // vLLM releases nothing for a null list (`if pages_to_release:`), so null reads as [].
  if (release.present && release.value.kind != Kind::null) {
    if (!release.is_list()) return refuse("pages_to_release: expected a list of integers");
    if (release.failed()) return refuse(release.error);
  }
  return request;
}

std::optional<DecodeError> decode_batch_exists_request(std::string_view body, KeyListRequest& out) {
  clear(out);
  if (fast_batch_exists_request(body, out)) return std::nullopt;
  clear(out);
  KeyListSink sink(out, false);
  if (auto error = object_error(internal::read_object(body, out.buffer, sink))) return error;
  const Member& keys = sink.members[0];
  if (!keys.present) return std::nullopt;
  if (!keys.is_list()) return refuse(std::string(kInvalidKeysFormat));
  if (keys.failed()) return refuse(keys.error);
  return std::nullopt;
}

std::optional<DecodeError> decode_get_locations_request(std::string_view body, KeyListRequest& out) {
  clear(out);
  if (fast_get_locations_request(body, out)) return std::nullopt;
  clear(out);
  KeyListSink sink(out, true);
  if (auto error = object_error(internal::read_object(body, out.buffer, sink))) return error;
  const auto& [keys, rank] = sink.members;
  if (lacks_rank_or_list(rank, keys)) return refuse(std::string(kNeedRankAndKeys));
  if (auto error = check_int64(rank.value, "rank", out.rank)) return error;
  if (keys.failed()) return refuse(keys.error);
  return std::nullopt;
}

Decoded<BatchExistsRequest> decode_batch_exists_request(std::string_view body) {
  KeyListRequest views;
  auto error = decode_batch_exists_request(body, views);
  return owning<BatchExistsRequest>(std::move(error), views);
}

Decoded<GetLocationsRequest> decode_get_locations_request(std::string_view body) {
  KeyListRequest views;
  auto error = decode_get_locations_request(body, views);
  return owning<GetLocationsRequest>(std::move(error), views);
}

// ---- Server side: response encoders ----

std::string encode_message(std::string_view message) {
  std::string out;
  out.reserve(message.size() + 16);
  out += "{\"message\":";
  append_json_string(out, message);
  out += '}';
  return out;
}

std::string encode_detail(std::string_view detail) {
  std::string out;
  out.reserve(detail.size() + 16);
  out += "{\"detail\":";
  append_json_string(out, detail);
  out += '}';
  return out;
}

std::string encode_allocate_response(Rank rank, std::span<const BlockKey> keys, std::span<const Page> pages) {
  const std::size_t n = std::min(keys.size(), pages.size());
  std::size_t bound = sizeof R"({"rank":,"results":[]})" + JsonWriter::kIntBound;
  for (std::size_t i = 0; i < n; ++i) bound += JsonWriter::string_bound(keys[i].key) + JsonWriter::kIntBound + 4;
  std::string out;
  JsonWriter w(out, bound);
  w.raw("{\"rank\":");
  w.integer(rank);
  w.raw(",\"results\":[");
  for (std::size_t i = 0; i < n; ++i) {
    if (i) w.ch(',');
    w.ch('[');
    w.string(keys[i].key);
    w.ch(',');
    w.integer(pages[i]);
    w.ch(']');
  }
  w.raw("]}");
  w.finish();
  return out;
}

namespace {

// {"<field>":[true,false,...]}; kHead is `{"<field>":`.
std::string encode_bool_list_response(std::string_view kHead, const std::vector<bool>& exists) {
  std::string out;
  JsonWriter w(out, kHead.size() + exists.size() * (sizeof ",false" - 1) + sizeof "[]}");
  w.raw(kHead);
  // Each element with its comma in one write of constant length (inlined stores, no call per
  // element); the first comma then becomes the '['.
  for (const bool e : exists) {
    if (e) {
      w.raw(",true");
    } else {
      w.raw(",false");
    }
  }
  if (exists.empty()) w.ch('[');
  w.raw("]}");
  w.finish();
  out[kHead.size()] = '[';
  return out;
}

}  // namespace

std::string encode_batch_exists_response(const std::vector<bool>& exists) {
  return encode_bool_list_response("{\"exists\":", exists);
}

std::string encode_delete_keys_response(const std::vector<bool>& deleted) {
  return encode_bool_list_response("{\"deleted\":", deleted);
}

// ---- GET /stats: every field of StateStats and RankStats under its own name ----

std::string encode_stats_response(const StateStats& stats) {
  std::string out = "{\"ranks\":[";
  for (std::size_t i = 0; i < stats.ranks.size(); ++i) {
    const auto& [rank, r] = stats.ranks[i];
    out += i == 0 ? "{\"rank\":" : ",{\"rank\":";
    append_int(out, rank);
    for (const auto& [name, member] : kRankStatsFields) {
      out += ",\"";
      out += name;
      out += "\":";
      append_int(out, r.*member);
    }
    out += ",\"";
    out += kKeptOnReleaseField;
    out += "\":";
    out += std::to_string(r.kept_on_release);
    out += '}';
  }
  out += ']';
  for (const auto& [name, member, counter, help] : kStateStatsFields) {
    out += ",\"";
    out += name;
    out += "\":";
    out += std::to_string(stats.*member);
  }
  out += '}';
  return out;
}

std::string encode_get_locations_response(std::span<const std::optional<Page>> locations) {
  std::string out;
  JsonWriter w(out, sizeof R"({"locations":[]})" + locations.size() * (JsonWriter::kIntBound + 1));
  w.raw("{\"locations\":[");
  for (std::size_t i = 0; i < locations.size(); ++i) {
    if (i) w.ch(',');
    if (locations[i]) {
      w.integer(*locations[i]);
    } else {
      w.raw("null");
    }
  }
  w.raw("]}");
  w.finish();
  return out;
}

// ---- Namespaces (docs/protocol.md, "Namespaces"): not on a hot path ----

std::string encode_namespaces_response(std::span<const NamespaceSummary> namespaces) {
  std::string out = "{\"namespaces\":[";
  for (std::size_t i = 0; i < namespaces.size(); ++i) {
    const NamespaceSummary& n = namespaces[i];
    out += i == 0 ? "{\"name\":" : ",{\"name\":";
    append_json_string(out, n.name);
    out += ",\"ranks\":[";
    for (std::size_t r = 0; r < n.ranks.size(); ++r) {
      if (r) out += ',';
      append_int(out, n.ranks[r]);
    }
    out += "],\"pages\":";
    append_int(out, n.pages);
    out += ",\"keys\":";
    append_int(out, static_cast<std::int64_t>(n.keys));
    out += '}';
  }
  out += "]}";
  return out;
}

std::string encode_drop_namespace_response(std::string_view name, const NamespaceDropOutcome& outcome) {
  std::string out = "{\"namespace\":";
  append_json_string(out, name);
  out += outcome.dropped ? ",\"dropped\":true,\"ranks\":" : ",\"dropped\":false,\"ranks\":";
  append_int(out, static_cast<std::int64_t>(outcome.ranks));
  out += ",\"pages\":";
  append_int(out, outcome.pages);
  out += ",\"keys_removed\":";
  append_int(out, static_cast<std::int64_t>(outcome.keys_removed));
  out += '}';
  return out;
}

std::string encode_key_status_response(std::size_t ranks_initialized, std::span<const std::optional<KeyInfo>> status) {
  std::string out = "{\"ranks_initialized\":";
  append_int(out, static_cast<std::int64_t>(ranks_initialized));
  out += ",\"status\":[";
  for (std::size_t i = 0; i < status.size(); ++i) {
    if (i) out += ',';
    if (!status[i]) {
      out += "null";
      continue;
    }
    out += "{\"ranks\":[";
    const auto& pages = status[i]->pages;
    for (std::size_t r = 0; r < pages.size(); ++r) {
      if (r) out += ',';
      append_int(out, pages[r].first);
    }
    out += "],\"tp_world_size\":";
    append_int(out, status[i]->tp_world_size);
    out += status[i]->complete ? ",\"complete\":true}" : ",\"complete\":false}";
  }
  out += "]}";
  return out;
}

std::string encode_path_rank_validation_error(std::string_view input) {
  std::string out =
      "{\"detail\":[{\"type\":\"int_parsing\",\"loc\":[\"path\",\"rank\"],"
      "\"msg\":\"Input should be a valid integer, unable to parse string as an integer\",\"input\":";
  append_json_string(out, input);
  out += "}]}";
  return out;
}

}  // namespace hf3fs_meta::protocol
