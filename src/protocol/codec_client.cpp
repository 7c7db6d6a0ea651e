// The client's half of the wire codec (codec.cpp says how the codec is written): its requests,
// encoded compact, and its decoders of the server's success answers, each checked against what was
// sent. Part of hf3fs_meta::protocol, which hf3fs_meta::client links.
#include "hf3fs_meta/protocol.hpp"

#include <optional>
#include <span>
#include <string>
#include <utility>

#include "hf3fs_meta/routes.hpp"  // valid_namespace_name
#include "protocol/codec_support.hpp"

namespace hf3fs_meta::protocol {

using namespace detail;  // the codec's own shared pieces (codec_support.hpp)

// ---- Client side: request encoders ----

std::string encode_initialize_request(std::int64_t num_pages, Role role) {
  std::string out = "{\"num_pages\":";
  append_int(out, num_pages);
  out += ",\"role\":";
  append_json_string(out, to_string(role));
  out += '}';
  return out;
}

// The batch encoders size their output by a bound, then write it in one pass: these run once per
// call on up to 1,250 keys.

std::string encode_allocate_request(Rank rank, std::span<const BlockKey> keys) {
  std::size_t bound = sizeof R"({"rank":,"keys":[]})" + JsonWriter::kIntBound;
  for (const auto& k : keys) bound += JsonWriter::string_bound(k.key) + JsonWriter::string_bound(k.prefix_key) + 4;
  std::string out;
  JsonWriter w(out, bound);
  w.raw("{\"rank\":");
  w.integer(rank);
  w.raw(",\"keys\":[");
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (i) w.ch(',');
    w.ch('[');
    w.string(keys[i].key);
    w.ch(',');
    w.string(keys[i].prefix_key);
    w.ch(']');
  }
  w.raw("]}");
  w.finish();
  return out;
}

std::string encode_confirm_write_request(Rank rank, std::span<const Confirmation> confirmations,
                                         std::span<const Page> pages_to_release) {
  return encode_confirm_write_request(rank, confirmations, pages_to_release, {});
}

std::string encode_confirm_write_request(Rank rank, std::span<const Confirmation> confirmations,
                                         std::span<const Page> pages_to_release,
                                         std::span<const ReleaseKey> release_keys) {
  std::size_t bound = sizeof R"({"rank":,"confirmations":[],"pages_to_release":[]})" + JsonWriter::kIntBound +
                      pages_to_release.size() * (JsonWriter::kIntBound + 1);
  for (const auto& c : confirmations) bound += JsonWriter::string_bound(c.key) + JsonWriter::kIntBound + 4;
  for (const auto& k : release_keys) bound += JsonWriter::string_bound(k.key) + 3;
  std::string out;
  JsonWriter w(out, bound);
  w.raw("{\"rank\":");
  w.integer(rank);
  w.raw(",\"confirmations\":[");
  for (std::size_t i = 0; i < confirmations.size(); ++i) {
    if (i) w.ch(',');
    w.ch('[');
    w.string(confirmations[i].key);
    w.ch(',');
    w.integer(confirmations[i].page);
    w.ch(']');
  }
  w.raw("],\"pages_to_release\":[");
  auto keyed = release_keys.begin();  // the next keyed entry, by ascending index
  for (std::size_t i = 0; i < pages_to_release.size(); ++i) {
    if (i) w.ch(',');
    if (keyed == release_keys.end() || keyed->index != i) {
      w.integer(pages_to_release[i]);
      continue;
    }
    w.ch('[');
    w.string(keyed->key);
    w.ch(',');
    w.integer(pages_to_release[i]);
    w.ch(']');
    ++keyed;
  }
  w.raw("]}");
  w.finish();
  return out;
}

namespace {
std::size_t string_list_bound(std::span<const std::string> keys) {
  std::size_t bound = 2;
  for (const auto& k : keys) bound += JsonWriter::string_bound(k) + 1;
  return bound;
}

void write_string_list(JsonWriter& w, std::span<const std::string> keys) {
  w.ch('[');
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (i) w.ch(',');
    w.string(keys[i]);
  }
  w.ch(']');
}
}  // namespace

std::string encode_batch_exists_request(std::span<const std::string> keys) {
  std::string out;
  JsonWriter w(out, sizeof R"({"keys":})" + string_list_bound(keys));
  w.raw("{\"keys\":");
  write_string_list(w, keys);
  w.ch('}');
  w.finish();
  return out;
}

std::string encode_get_locations_request(Rank rank, std::span<const std::string> keys) {
  std::string out;
  JsonWriter w(out, sizeof R"({"rank":,"keys":})" + JsonWriter::kIntBound + string_list_bound(keys));
  w.raw("{\"rank\":");
  w.integer(rank);
  w.raw(",\"keys\":");
  write_string_list(w, keys);
  w.ch('}');
  w.finish();
  return out;
}

// ---- Client side: success decoders ----

Decoded<std::string> decode_initialize_response(std::string_view body) {
  ParsedJson json;
  if (!json.parse(body)) return refuse("answer: not JSON (" + json.error_text() + ")");
  if (!json.root().IsObject()) return refuse("answer: expected a JSON object");
  const Value* message = find_member(json.root(), "message");
  if (!message) return refuse("message: missing from the answer");
  if (!message->IsString()) return refuse("message: expected a string");
  return std::string(string_of(*message));
}

Decoded<DropOutcome> decode_drop_response(std::string_view body) {
  ParsedJson json;
  if (!json.parse(body)) return refuse("answer: not JSON (" + json.error_text() + ")");
  if (!json.root().IsObject()) return refuse("answer: expected a JSON object");
  DropOutcome out;
  const Value* dropped = find_member(json.root(), "dropped");
  if (!dropped || !dropped->IsBool()) return refuse("dropped: expected true or false");
  out.dropped = dropped->GetBool();
  std::int64_t counts[3] = {};
  const char* names[3] = {"pages", "mappings", "keys_removed"};
  for (int i = 0; i < 3; ++i) {
    const Value* v = find_member(json.root(), names[i]);
    if (!v || !v->IsInt64() || v->GetInt64() < 0) return refuse(std::string(names[i]) + ": expected a count");
    counts[i] = v->GetInt64();
  }
  out.pages = counts[0];
  out.mappings = static_cast<std::size_t>(counts[1]);
  out.keys_removed = static_cast<std::size_t>(counts[2]);
  return out;
}

namespace {

// A success answer {"<name>": [element, ...], ...}: the sinks of the list answers read its one
// list member and skip the others (FastAPI's "rank").
struct AnswerSink : SinkBase {
  explicit AnswerSink(std::string_view list_name) : name(list_name) {}
  int field(std::string_view member) const { return member == name ? 0 : -1; }
  void value(int, const Scalar& s) {
    list.start(s);
    count = 0;
  }
  void list_end(int, std::size_t n) { count = n; }

  std::string_view name;
  Member list;
  std::size_t count = 0;
};

// Judged in this order: not JSON; not an object; the list missing; not a list; the wrong number
// of entries; the first bad element.
template <class Sink>
std::optional<DecodeError> read_answer(std::string_view body, std::size_t expected, Sink& sink) {
  internal::ScratchBuffer scratch;
  const internal::ReadResult read = internal::read_object(body, scratch.get(), sink);
  if (!read.not_json.empty()) return refuse("answer: not JSON (" + read.not_json + ")");
  if (!read.object) return refuse("answer: expected a JSON object");
  const std::string name(sink.name);
  if (!sink.list.present) return refuse(name + ": missing from the answer");
  if (!sink.list.is_list()) return refuse(name + ": expected a list");
  if (sink.count != expected) {
    return refuse(name + ": expected " + std::to_string(expected) + " entries (one per key sent), got " +
                  std::to_string(sink.count));
  }
  if (sink.list.failed()) return refuse(sink.list.error);
  return std::nullopt;
}

// results: [[key, page], ...], each key the one sent at that index, each page an integer >= -1.
class AllocateAnswerSink : public AnswerSink {
 public:
  AllocateAnswerSink(std::span<const BlockKey> sent, std::vector<Page>& out)
      : AnswerSink("results"), sent_(sent), out_(out) {}
  void value(int f, const Scalar& s) {
    AnswerSink::value(f, s);
    out_.clear();
  }
  void element(int, std::size_t index, const Scalar& s) {
    pair_.start(s);
    if (s.kind != Kind::array) pair_error(index);
  }
  void item(int, std::size_t, std::size_t position, const Scalar& s) { pair_.item(position, s); }
  void element_end(int, std::size_t index, std::size_t count) {
    if (list.failed() || index >= sent_.size()) return;  // past the keys sent: the count is reported
    if (!pair_.is_pair(count) || pair_.first.kind != Kind::string) return pair_error(index);
    if (pair_.first.string != sent_[index].key) {
      return list.fail(indexed("results", index) + ": key '" + std::string(pair_.first.string) +
                       "' was not sent at this position");
    }
    if (pair_.second.kind != Kind::integer || pair_.second.integer < kNoPage) {
      return list.fail(indexed("results", index) + ": page must be an integer >= -1");
    }
    out_.push_back(pair_.second.integer);
  }

 private:
  void pair_error(std::size_t index) { list.fail(indexed("results", index) + ": expected a [key, page] pair"); }
  std::span<const BlockKey> sent_;
  std::vector<Page>& out_;
  Pair pair_;
};

// A list of booleans under `field`: "exists", or "deleted" (POST /keys/delete).
class BoolListAnswerSink : public AnswerSink {
 public:
  BoolListAnswerSink(std::vector<bool>& out, std::string_view field) : AnswerSink(field), out_(out) {}
  void element(int, std::size_t index, const Scalar& s) {
    if (s.kind != Kind::boolean) return list.fail(indexed(name, index) + ": expected a boolean");
    if (index < out_.size()) out_[index] = s.boolean;
  }

 private:
  std::vector<bool>& out_;
};

class LocationsAnswerSink : public AnswerSink {
 public:
  explicit LocationsAnswerSink(std::vector<std::optional<Page>>& out) : AnswerSink("locations"), out_(out) {}
  void element(int, std::size_t index, const Scalar& s) {
    if (s.kind != Kind::null && s.kind != Kind::integer) {
      return list.fail(indexed("locations", index) + ": expected an integer or null");
    }
    if (index >= out_.size()) return;
    if (s.kind == Kind::null) {
      out_[index].reset();
    } else {
      out_[index] = s.integer;
    }
  }

 private:
  std::vector<std::optional<Page>>& out_;
};

}  // namespace

Decoded<std::vector<Page>> decode_allocate_response(std::string_view body, std::span<const BlockKey> sent) {
  std::vector<Page> out;
  out.reserve(sent.size());
  const bool fast = internal::JsonCursor(body).list_answer(
      "results", sent.size(), [&](internal::JsonCursor& c, std::size_t i) {
        const std::string& key = sent[i].key;
        std::int64_t page = 0;
        const auto same_key = [&] {
          return internal::clean_prefix<true>(key) == key.size() && c.lit('"') && c.lit(key) && c.lit('"');
        };
        if (!c.pair(same_key, [&] { return c.integer(page) && page >= kNoPage; })) return false;
        out.push_back(page);
        return true;
      });
  if (fast) return out;
  AllocateAnswerSink sink(sent, out);
  if (auto error = read_answer(body, sent.size(), sink)) return std::move(*error);
  return out;
}

namespace {

Decoded<std::vector<bool>> decode_bool_list_response(std::string_view body, std::string_view field,
                                                     std::size_t expected) {
  std::vector<bool> out(expected);
  const bool fast = internal::JsonCursor(body).list_answer(
      field, expected, [&](internal::JsonCursor& c, std::size_t i) {
        bool value = false;
        if (!c.boolean(value)) return false;
        out[i] = value;
        return true;
      });
  if (fast) return out;
  BoolListAnswerSink sink(out, field);
  if (auto error = read_answer(body, expected, sink)) return std::move(*error);
  return out;
}

}  // namespace

Decoded<std::vector<bool>> decode_batch_exists_response(std::string_view body, std::size_t expected) {
  return decode_bool_list_response(body, "exists", expected);
}

Decoded<std::vector<bool>> decode_delete_keys_response(std::string_view body, std::size_t expected) {
  return decode_bool_list_response(body, "deleted", expected);
}

Decoded<std::vector<std::optional<Page>>> decode_get_locations_response(std::string_view body, std::size_t expected) {
  std::vector<std::optional<Page>> out(expected);
  const bool fast = internal::JsonCursor(body).list_answer(
      "locations", expected, [&](internal::JsonCursor& c, std::size_t i) {
        std::int64_t page = 0;
        if (c.lit("null")) {
          out[i].reset();
        } else if (c.integer(page)) {
          out[i] = page;
        } else {
          return false;
        }
        return true;
      });
  if (fast) return out;
  LocationsAnswerSink sink(out);
  if (auto error = read_answer(body, expected, sink)) return std::move(*error);
  return out;
}

// GET /stats: every field of StateStats and RankStats under its own name.
Decoded<StateStats> decode_stats_response(std::string_view body) {
  ParsedJson json;
  if (!json.parse(body)) return refuse("answer: not JSON (" + json.error_text() + ")");
  if (!json.root().IsObject()) return refuse("answer: expected a JSON object");
  auto unsigned_field = [](const Value& object, std::string_view name, const std::string& where,
                           std::uint64_t& out) -> std::optional<DecodeError> {
    const Value* v = find_member(object, name);
    if (!v || !v->IsUint64()) return refuse(where + std::string(name) + ": expected a non-negative integer");
    out = v->GetUint64();
    return std::nullopt;
  };
  StateStats stats;
  const Value* ranks = find_member(json.root(), "ranks");
  if (!ranks || !ranks->IsArray()) return refuse("ranks: expected a list");
  for (rapidjson::SizeType i = 0; i < ranks->Size(); ++i) {
    const Value& item = (*ranks)[i];
    const std::string where = indexed("ranks", i) + ".";
    if (!item.IsObject()) return refuse(indexed("ranks", i) + ": expected an object");
    const Value* rank = find_member(item, "rank");
    if (!rank || !rank->IsInt64()) return refuse(where + "rank: expected an integer");
    RankStats r;
    for (const auto& [name, member] : kRankStatsFields) {
      std::uint64_t value = 0;
      if (auto error = unsigned_field(item, name, where, value)) return std::move(*error);
      r.*member = static_cast<std::int64_t>(value);
    }
    if (auto error = unsigned_field(item, kKeptOnReleaseField, where, r.kept_on_release)) return std::move(*error);
    stats.ranks.emplace_back(rank->GetInt64(), r);
  }
  for (const auto& [name, member, counter, help] : kStateStatsFields) {
    if (auto error = unsigned_field(json.root(), name, "", stats.*member)) return std::move(*error);
  }
  return stats;
}

// ---- Namespaces (docs/protocol.md, "Namespaces"): DOM decoders, off the hot path ----

namespace {

// A JSON object's member `name` as a count (a non-negative integer), or the refusal naming it.
std::optional<DecodeError> count_member(const Value& object, std::string_view name, const std::string& where,
                                        std::int64_t& out) {
  const Value* v = find_member(object, name);
  if (!v || !v->IsInt64() || v->GetInt64() < 0) return refuse(where + std::string(name) + ": expected a count");
  out = v->GetInt64();
  return std::nullopt;
}

// The member "ranks": a list of integers.
std::optional<DecodeError> rank_list_member(const Value& object, const std::string& where, std::vector<Rank>& out) {
  const Value* ranks = find_member(object, "ranks");
  if (!ranks || !ranks->IsArray()) return refuse(where + "ranks: expected a list");
  out.clear();
  out.reserve(ranks->Size());
  for (rapidjson::SizeType i = 0; i < ranks->Size(); ++i) {
    if (!(*ranks)[i].IsInt64()) return refuse(where + indexed("ranks", i) + ": expected an integer");
    out.push_back((*ranks)[i].GetInt64());
  }
  return std::nullopt;
}

std::optional<DecodeError> parse_answer_object(ParsedJson& json, std::string_view body) {
  if (!json.parse(body)) return refuse("answer: not JSON (" + json.error_text() + ")");
  if (!json.root().IsObject()) return refuse("answer: expected a JSON object");
  return std::nullopt;
}

}  // namespace

Decoded<std::vector<NamespaceSummary>> decode_namespaces_response(std::string_view body) {
  ParsedJson json;
  if (auto error = parse_answer_object(json, body)) return std::move(*error);
  const Value* list = find_member(json.root(), "namespaces");
  if (!list || !list->IsArray()) return refuse("namespaces: expected a list");
  std::vector<NamespaceSummary> out(list->Size());
  for (rapidjson::SizeType i = 0; i < list->Size(); ++i) {
    const Value& item = (*list)[i];
    const std::string where = indexed("namespaces", i) + ".";
    if (!item.IsObject()) return refuse(indexed("namespaces", i) + ": expected an object");
    const Value* name = find_member(item, "name");
    if (!name || !name->IsString() || !valid_namespace_name(string_of(*name))) {
      return refuse(where + "name: expected a namespace name");
    }
    NamespaceSummary& n = out[i];
    n.name = string_of(*name);
    if (auto error = rank_list_member(item, where, n.ranks)) return std::move(*error);
    std::int64_t keys = 0;
    if (auto error = count_member(item, "pages", where, n.pages)) return std::move(*error);
    if (auto error = count_member(item, "keys", where, keys)) return std::move(*error);
    n.keys = static_cast<std::size_t>(keys);
  }
  return out;
}

Decoded<NamespaceDropOutcome> decode_drop_namespace_response(std::string_view body, std::string_view sent) {
  ParsedJson json;
  if (auto error = parse_answer_object(json, body)) return std::move(*error);
  const Value* name = find_member(json.root(), "namespace");
  if (!name || !name->IsString()) return refuse("namespace: expected a string");
  if (string_of(*name) != sent) {
    return refuse("namespace: the answer names '" + std::string(string_of(*name)) + "', not the namespace sent");
  }
  NamespaceDropOutcome out;
  const Value* dropped = find_member(json.root(), "dropped");
  if (!dropped || !dropped->IsBool()) return refuse("dropped: expected true or false");
  out.dropped = dropped->GetBool();
  std::int64_t ranks = 0, keys_removed = 0;
  if (auto error = count_member(json.root(), "ranks", "", ranks)) return std::move(*error);
  if (auto error = count_member(json.root(), "pages", "", out.pages)) return std::move(*error);
  if (auto error = count_member(json.root(), "keys_removed", "", keys_removed)) return std::move(*error);
  out.ranks = static_cast<std::size_t>(ranks);
  out.keys_removed = static_cast<std::size_t>(keys_removed);
  return out;
}

Decoded<KeyStatusAnswer> decode_key_status_response(std::string_view body, std::size_t expected) {
  ParsedJson json;
  if (auto error = parse_answer_object(json, body)) return std::move(*error);
  KeyStatusAnswer out;
  std::int64_t ranks_initialized = 0;
  if (auto error = count_member(json.root(), "ranks_initialized", "", ranks_initialized)) return std::move(*error);
  out.ranks_initialized = static_cast<std::size_t>(ranks_initialized);
  const Value* list = find_member(json.root(), "status");
  if (!list || !list->IsArray()) return refuse("status: expected a list");
  if (list->Size() != expected) {
    return refuse("status: expected " + std::to_string(expected) + " entries (one per key sent), got " +
                  std::to_string(list->Size()));
  }
  out.status.resize(expected);
  for (rapidjson::SizeType i = 0; i < list->Size(); ++i) {
    const Value& item = (*list)[i];
    if (item.IsNull()) continue;
    const std::string where = indexed("status", i) + ".";
    if (!item.IsObject()) return refuse(indexed("status", i) + ": expected an object or null");
    KeyStatus& k = out.status[i].emplace();
    if (auto error = rank_list_member(item, where, k.ranks)) return std::move(*error);
    if (auto error = count_member(item, "tp_world_size", where, k.tp_world_size)) return std::move(*error);
    const Value* complete = find_member(item, "complete");
    if (!complete || !complete->IsBool()) return refuse(where + "complete: expected true or false");
    k.complete = complete->GetBool();
  }
  return out;
}

}  // namespace hf3fs_meta::protocol
