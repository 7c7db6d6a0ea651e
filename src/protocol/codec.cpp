// The wire codec: request and response bodies <-> typed values.
//
// Encoders write compact JSON (no spaces) straight into a std::string. The server's answers must be
// byte for byte what FastAPI's JSONResponse renders (json.dumps with separators (",", ":") and
// ensure_ascii=False). Our client's requests use the same compact form; vLLM's own client sends
// `{"rank": 3, "keys": [["k", ""]]}` with spaces and \u-escaped non-ASCII, and the server reads
// both alike.
//
// Decoders parse with RapidJSON. The client's decoders check an answer against what was sent; the
// server's strict decoders refuse what vLLM would take with a 500 or corrupt its state with, and
// keep vLLM's exact 400 texts where vLLM has one (PROTOCOL.md, "Deliberate deviations").
#include "hf3fs_meta/protocol.hpp"
#include "hf3fs_meta/routes.hpp"

#include <algorithm>
#include <charconv>
#include <string>
#include <utility>

#include "internal/field_text.hpp"
#include "internal/compact_json.hpp"
#include "internal/json.hpp"
#include "internal/list_answer_reader.hpp"

namespace hf3fs_meta::protocol {

using internal::append_int;
using internal::append_json_string;
using internal::find_member;
using internal::indexed;
using internal::IntCheck;
using internal::ParsedJson;
using internal::read_int64;
using internal::string_of;
using rapidjson::Value;

namespace {

// vLLM's own 400 texts, answered verbatim.
constexpr std::string_view kNeedRankAndKeys = "Invalid request format: need 'rank' and 'keys'";
constexpr std::string_view kNeedRankAndConfirmations =
    "Invalid request format: need 'rank' and 'confirmations'";
constexpr std::string_view kInvalidKeysFormat = "Invalid keys format";
constexpr std::string_view kInvalidInitialization = "Invalid initialization parameters";

DecodeError refuse(std::string message) { return DecodeError{std::move(message)}; }


// "field: expected an integer" / "field: out of range for a 64-bit integer", or nullopt if fine.
std::optional<DecodeError> check_int64(const Value& value, const std::string& field, std::int64_t& out) {
  switch (read_int64(value, out)) {
    case IntCheck::ok: return std::nullopt;
    case IntCheck::out_of_range: return refuse(field + ": out of range for a 64-bit integer");
    case IntCheck::not_integer: break;
  }
  return refuse(field + ": expected an integer");
}

// The request body as the server requires it: a JSON object.
std::optional<DecodeError> parse_object(ParsedJson& json, std::string_view body) {
  if (!json.parse(body)) return refuse("body: expected a JSON object (invalid JSON: " + json.error_text() + ")");
  if (!json.root().IsObject()) return refuse("body: expected a JSON object");
  return std::nullopt;
}

// The answer body as the client requires it.
std::optional<DecodeError> parse_answer(ParsedJson& json, std::string_view body) {
  if (!json.parse(body)) return refuse("answer: not JSON (" + json.error_text() + ")");
  if (!json.root().IsObject()) return refuse("answer: expected a JSON object");
  return std::nullopt;
}

// The parsed document dies with the call, so the keys are copied into `out.unescaped`, sized first
// so that the views taken into it stay valid.
std::optional<DecodeError> read_string_keys(const Value& keys, KeyListRequest& out) {
  std::size_t bytes = 0;
  for (rapidjson::SizeType i = 0; i < keys.Size(); ++i) {
    if (!keys[i].IsString()) return refuse(indexed("keys", i) + ": expected a string");
    bytes += keys[i].GetStringLength();
  }
  out.unescaped.reserve(bytes);
  out.keys.reserve(keys.Size());
  for (rapidjson::SizeType i = 0; i < keys.Size(); ++i) {
    const std::size_t offset = out.unescaped.size();
    out.unescaped += string_of(keys[i]);
    out.keys.emplace_back(out.unescaped.data() + offset, out.unescaped.size() - offset);
  }
  return std::nullopt;
}

// Shared by allocate and get_locations: vLLM's `rank is None or not isinstance(keys, list)` test,
// then the rank's type.
std::optional<DecodeError> read_rank_and_keys(const Value& root, Rank& rank, const Value*& keys) {
  const Value* rank_value = find_member(root, "rank");
  keys = find_member(root, "keys");
  if (!rank_value || rank_value->IsNull() || (keys && !keys->IsArray())) return refuse(std::string(kNeedRankAndKeys));
  return check_int64(*rank_value, "rank", rank);
}

}  // namespace

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
using internal::SizedWriter;

std::string encode_allocate_request(Rank rank, std::span<const BlockKey> keys) {
  std::size_t bound = sizeof R"({"rank":,"keys":[]})" + SizedWriter::kIntBound;
  for (const auto& k : keys) bound += SizedWriter::string_bound(k.key) + SizedWriter::string_bound(k.prefix_key) + 4;
  std::string out;
  SizedWriter w(out, bound);
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
  std::size_t bound = sizeof R"({"rank":,"confirmations":[],"pages_to_release":[]})" + SizedWriter::kIntBound +
                      pages_to_release.size() * (SizedWriter::kIntBound + 1);
  for (const auto& c : confirmations) bound += SizedWriter::string_bound(c.key) + SizedWriter::kIntBound + 4;
  std::string out;
  SizedWriter w(out, bound);
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
  for (std::size_t i = 0; i < pages_to_release.size(); ++i) {
    if (i) w.ch(',');
    w.integer(pages_to_release[i]);
  }
  w.raw("]}");
  w.finish();
  return out;
}

namespace {
std::size_t string_list_bound(std::span<const std::string> keys) {
  std::size_t bound = 2;
  for (const auto& k : keys) bound += SizedWriter::string_bound(k) + 1;
  return bound;
}

void write_string_list(SizedWriter& w, std::span<const std::string> keys) {
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
  SizedWriter w(out, sizeof R"({"keys":})" + string_list_bound(keys));
  w.raw("{\"keys\":");
  write_string_list(w, keys);
  w.ch('}');
  w.finish();
  return out;
}

std::string encode_get_locations_request(Rank rank, std::span<const std::string> keys) {
  std::string out;
  SizedWriter w(out, sizeof R"({"rank":,"keys":})" + SizedWriter::kIntBound + string_list_bound(keys));
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
  if (auto error = parse_answer(json, body)) return std::move(*error);
  const Value* message = find_member(json.root(), "message");
  if (!message) return refuse("message: missing from the answer");
  if (!message->IsString()) return refuse("message: expected a string");
  return std::string(string_of(*message));
}

namespace {

using internal::ListAnswerReader;
using internal::Scalar;

// The first bad element's message is the one reported; later elements are not looked at.
class FirstError {
 public:
  void reset() { error_.reset(); }
  bool failed() const { return error_.has_value(); }
  void fail(std::string message) {
    if (!error_) error_ = std::move(message);
  }
  std::optional<std::string> error() const { return error_; }

 private:
  std::optional<std::string> error_;
};

// results: [[key, page], ...], each key the one sent at that index, each page an integer >= -1.
class AllocateSink : public FirstError {
 public:
  AllocateSink(std::span<const BlockKey> sent, std::vector<Allocation>& out) : sent_(sent), out_(out) {}
  void reset() {
    FirstError::reset();
    out_.clear();
  }
  void element(std::size_t index, const Scalar&) { pair_error(index); }
  void begin(std::size_t index, bool is_array) {
    if (!is_array) pair_error(index);
    key_ = Scalar{};
    page_ = Scalar{};
  }
  void item(std::size_t, std::size_t position, const Scalar& s) {
    if (position == 0) key_ = s;
    if (position == 1) page_ = s;
  }
  void end(std::size_t index, std::size_t count) {
    if (failed() || index >= sent_.size()) return;  // the count is reported instead
    if (count != 2 || key_.kind != Scalar::Kind::string) return pair_error(index);
    if (key_.string != sent_[index].key) {
      return fail(indexed("results", index) + ": key '" + std::string(key_.string) + "' was not sent at this position");
    }
    if (page_.kind != Scalar::Kind::integer || page_.integer < kNoPage) {
      return fail(indexed("results", index) + ": page must be an integer >= -1");
    }
    out_.push_back(Allocation{sent_[index].key, page_.integer});
  }

 private:
  void pair_error(std::size_t index) { fail(indexed("results", index) + ": expected a [key, page] pair"); }
  std::span<const BlockKey> sent_;
  std::vector<Allocation>& out_;
  Scalar key_;
  Scalar page_;
};

class ExistsSink : public FirstError {
 public:
  explicit ExistsSink(std::vector<bool>& out) : out_(out) {}
  void reset() { FirstError::reset(); }
  void element(std::size_t index, const Scalar& s) {
    if (s.kind != Scalar::Kind::boolean) return fail(indexed("exists", index) + ": expected a boolean");
    if (index < out_.size()) out_[index] = s.boolean;
  }
  void begin(std::size_t index, bool) { fail(indexed("exists", index) + ": expected a boolean"); }
  void item(std::size_t, std::size_t, const Scalar&) {}
  void end(std::size_t, std::size_t) {}

 private:
  std::vector<bool>& out_;
};

class LocationsSink : public FirstError {
 public:
  explicit LocationsSink(std::vector<std::optional<Page>>& out) : out_(out) {}
  void reset() { FirstError::reset(); }
  void element(std::size_t index, const Scalar& s) {
    if (s.kind == Scalar::Kind::null) {
      if (index < out_.size()) out_[index].reset();
      return;
    }
    if (s.kind != Scalar::Kind::integer) return fail(indexed("locations", index) + ": expected an integer or null");
    if (index < out_.size()) out_[index] = s.integer;
  }
  void begin(std::size_t index, bool) { fail(indexed("locations", index) + ": expected an integer or null"); }
  void item(std::size_t, std::size_t, const Scalar&) {}
  void end(std::size_t, std::size_t) {}

 private:
  std::vector<std::optional<Page>>& out_;
};

}  // namespace

Decoded<std::vector<Allocation>> decode_allocate_response(std::string_view body, std::span<const BlockKey> sent) {
  std::vector<Allocation> out;
  out.reserve(sent.size());
  const bool fast = internal::JsonCursor(body).list_answer(
      "results", sent.size(), [&](internal::JsonCursor& c, std::size_t i) {
        const std::string& key = sent[i].key;
        std::int64_t page = 0;
        if (!c.lit('[')) return false;
        c.ws();
        if (!internal::is_plain_ascii(key) || !c.lit('"') || !c.lit(key) || !c.lit('"')) return false;
        c.ws();
        if (!c.lit(',')) return false;
        c.ws();
        if (!c.integer(page) || page < kNoPage) return false;
        c.ws();
        if (!c.lit(']')) return false;
        out.push_back(Allocation{key, page});
        return true;
      });
  if (fast) return out;
  out.clear();
  AllocateSink sink(sent, out);
  if (auto error = ListAnswerReader<AllocateSink>("results", sink).read(body, sent.size())) {
    return refuse(std::move(*error));
  }
  return out;
}

Decoded<std::vector<bool>> decode_batch_exists_response(std::string_view body, std::size_t expected) {
  std::vector<bool> out(expected);
  const bool fast = internal::JsonCursor(body).list_answer(
      "exists", expected, [&](internal::JsonCursor& c, std::size_t i) {
        bool value = false;
        if (!c.boolean(value)) return false;
        out[i] = value;
        return true;
      });
  if (fast) return out;
  ExistsSink sink(out);
  if (auto error = ListAnswerReader<ExistsSink>("exists", sink).read(body, expected)) return refuse(std::move(*error));
  return out;
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
  LocationsSink sink(out);
  if (auto error = ListAnswerReader<LocationsSink>("locations", sink).read(body, expected)) {
    return refuse(std::move(*error));
  }
  return out;
}

// ---- Server side: strict request decoders ----

// Fast paths for the forms clients send (ours compact, vLLM's with spaces), with plain ASCII keys:
// they only recognise requests the full decoders below accept, with the same result, and return
// nullopt for anything else.
namespace {

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
      if (!c.lit('[')) return false;
      c.ws();
      if (!c.plain_string(key)) return false;
      c.ws();
      if (!c.lit(',')) return false;
      c.ws();
      if (!c.plain_string(prefix)) return false;
      c.ws();
      if (!c.lit(']')) return false;
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
      if (!c.lit('[')) return false;
      c.ws();
      if (!c.plain_string(key)) return false;
      c.ws();
      if (!c.lit(',')) return false;
      c.ws();
      if (!c.integer(page)) return false;
      c.ws();
      if (!c.lit(']')) return false;
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

void clear(KeyListRequest& out) {
  out.rank = 0;
  out.keys.clear();
  out.unescaped.clear();
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
  ParsedJson json;
  if (auto error = parse_object(json, body)) return std::move(*error);
  AllocateRequest request;
  const Value* keys = nullptr;
  if (auto error = read_rank_and_keys(json.root(), request.rank, keys)) return std::move(*error);
  if (!keys) return request;
  request.keys.reserve(keys->Size());
  for (rapidjson::SizeType i = 0; i < keys->Size(); ++i) {
    const Value& pair = (*keys)[i];
    if (!pair.IsArray() || pair.Size() != 2 || !pair[0].IsString() || !pair[1].IsString()) {
      return refuse(indexed("keys", i) + ": expected a [key, prefix_key] pair of strings");
    }
    request.keys.push_back(BlockKey{std::string(string_of(pair[0])), std::string(string_of(pair[1]))});
  }
  return request;
}

Decoded<ConfirmWriteRequest> decode_confirm_write_request(std::string_view body) {
  if (auto fast = fast_confirm_write_request(body)) return std::move(*fast);
  ParsedJson json;
  if (auto error = parse_object(json, body)) return std::move(*error);
  const Value& root = json.root();
  const Value* rank = find_member(root, "rank");
  const Value* confirmations = find_member(root, "confirmations");
  if (!rank || rank->IsNull() || (confirmations && !confirmations->IsArray())) {
    return refuse(std::string(kNeedRankAndConfirmations));
  }
  ConfirmWriteRequest request;
  if (auto error = check_int64(*rank, "rank", request.rank)) return std::move(*error);
  if (confirmations) {
    request.confirmations.reserve(confirmations->Size());
    for (rapidjson::SizeType i = 0; i < confirmations->Size(); ++i) {
      const Value& pair = (*confirmations)[i];
      if (!pair.IsArray() || pair.Size() != 2 || !pair[0].IsString()) {
        return refuse(indexed("confirmations", i) + ": expected a [key, page] pair of a string and an integer");
      }
      Page page = 0;
      if (auto error = check_int64(pair[1], indexed("confirmations", i) + "[1]", page)) return std::move(*error);
      request.confirmations.push_back(Confirmation{std::string(string_of(pair[0])), page});
    }
  }
  // vLLM releases nothing for a null list (`if pages_to_release:`), so null reads as [].
  const Value* release = find_member(root, "pages_to_release");
  if (release && !release->IsNull()) {
    if (!release->IsArray()) return refuse("pages_to_release: expected a list of integers");
    request.pages_to_release.resize(release->Size());
    for (rapidjson::SizeType i = 0; i < release->Size(); ++i) {
      if (auto error = check_int64((*release)[i], indexed("pages_to_release", i), request.pages_to_release[i])) {
        return std::move(*error);
      }
    }
  }
  return request;
}

std::optional<DecodeError> decode_batch_exists_request(std::string_view body, KeyListRequest& out) {
  clear(out);
  if (fast_batch_exists_request(body, out)) return std::nullopt;
  clear(out);
  ParsedJson json;
  if (auto error = parse_object(json, body)) return error;
  const Value* keys = find_member(json.root(), "keys");
  if (!keys) return std::nullopt;
  if (!keys->IsArray()) return refuse(std::string(kInvalidKeysFormat));
  return read_string_keys(*keys, out);
}

std::optional<DecodeError> decode_get_locations_request(std::string_view body, KeyListRequest& out) {
  clear(out);
  if (fast_get_locations_request(body, out)) return std::nullopt;
  clear(out);
  ParsedJson json;
  if (auto error = parse_object(json, body)) return error;
  const Value* keys = nullptr;
  if (auto error = read_rank_and_keys(json.root(), out.rank, keys)) return error;
  if (!keys) return std::nullopt;
  return read_string_keys(*keys, out);
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

std::optional<Rank> parse_path_rank(std::string_view segment) noexcept {
  // from_chars takes a leading '-' but no '+', spaces or underscores: the plain form we accept.
  if (segment.empty() || segment == "-") return std::nullopt;
  Rank rank = 0;
  const auto [end, ec] = std::from_chars(segment.data(), segment.data() + segment.size(), rank);
  if (ec != std::errc() || end != segment.data() + segment.size()) return std::nullopt;
  return rank;
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
  std::size_t bound = sizeof R"({"rank":,"results":[]})" + SizedWriter::kIntBound;
  for (std::size_t i = 0; i < n; ++i) bound += SizedWriter::string_bound(keys[i].key) + SizedWriter::kIntBound + 4;
  std::string out;
  SizedWriter w(out, bound);
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

std::string encode_batch_exists_response(const std::vector<bool>& exists) {
  constexpr std::string_view kHead = "{\"exists\":";
  std::string out;
  SizedWriter w(out, kHead.size() + exists.size() * (sizeof ",false" - 1) + sizeof "[]}");
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

std::string encode_get_locations_response(std::span<const std::optional<Page>> locations) {
  std::string out;
  SizedWriter w(out, sizeof R"({"locations":[]})" + locations.size() * (SizedWriter::kIntBound + 1));
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

std::string encode_path_rank_validation_error(std::string_view input) {
  std::string out =
      "{\"detail\":[{\"type\":\"int_parsing\",\"loc\":[\"path\",\"rank\"],"
      "\"msg\":\"Input should be a valid integer, unable to parse string as an integer\",\"input\":";
  append_json_string(out, input);
  out += "}]}";
  return out;
}

}  // namespace hf3fs_meta::protocol

namespace hf3fs_meta {

std::string request_path(Route route, Rank rank) {
  const std::string_view pattern = path_of(route);
  const auto at = pattern.find(kRankParameter);
  if (at == std::string_view::npos) return std::string(pattern);
  std::string path(pattern.substr(0, at));
  internal::append_int(path, rank);
  path += pattern.substr(at + kRankParameter.size());
  return path;
}

}  // namespace hf3fs_meta
