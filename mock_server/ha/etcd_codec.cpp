#include "ha/etcd_codec.hpp"

#include <openssl/evp.h>

#include <charconv>

#include "internal/json.hpp"

namespace hf3fs_meta::server::ha {

namespace {

using rapidjson::Value;
using internal::append_int;
using internal::find_member;
using internal::string_of;

// ---- Writing ----
// Every string a request holds is base64 or a decimal number or an enum's name, none of which JSON
// escapes, so the bodies are written directly.

void field(std::string& out, const char* name) {
  if (out.back() != '{') out += ',';
  out += '"';
  out += name;
  out += "\":";
}

void bytes_field(std::string& out, const char* name, std::string_view bytes) {
  field(out, name);
  out += '"';
  out += base64_encode(bytes);
  out += '"';
}

void int_field(std::string& out, const char* name, std::int64_t value) {
  field(out, name);
  out += '"';
  append_int(out, value);
  out += '"';
}

void append_range(std::string& out, const RangeRequest& r) {
  out += '{';
  bytes_field(out, "key", r.key);
  if (!r.range_end.empty()) bytes_field(out, "range_end", r.range_end);
  if (r.limit != 0) int_field(out, "limit", r.limit);
  if (r.revision != 0) int_field(out, "revision", r.revision);
  if (r.keys_only) {
    field(out, "keys_only");
    out += "true";
  }
  out += '}';
}

void append_put(std::string& out, const PutRequest& p) {
  out += '{';
  bytes_field(out, "key", p.key);
  bytes_field(out, "value", p.value);
  if (p.lease != 0) int_field(out, "lease", p.lease);
  out += '}';
}

void append_delete(std::string& out, const DeleteRequest& d) {
  out += '{';
  bytes_field(out, "key", d.key);
  if (!d.range_end.empty()) bytes_field(out, "range_end", d.range_end);
  out += '}';
}

void append_compare(std::string& out, const Compare& c) {
  static constexpr const char* kTargets[] = {"VERSION", "CREATE", "MOD", "VALUE", "LEASE"};
  static constexpr const char* kResults[] = {"EQUAL", "GREATER", "LESS", "NOT_EQUAL"};
  static constexpr const char* kNumberFields[] = {"version", "create_revision", "mod_revision", nullptr, "lease"};
  const auto target = static_cast<std::size_t>(c.target);
  out += '{';
  field(out, "result");
  out.append("\"").append(kResults[static_cast<std::size_t>(c.result)]).append("\"");
  field(out, "target");
  out.append("\"").append(kTargets[target]).append("\"");
  bytes_field(out, "key", c.key);
  if (c.target == Compare::Target::value) {
    bytes_field(out, "value", c.value);
  } else {
    int_field(out, kNumberFields[target], c.number);
  }
  out += '}';
}

void append_ops(std::string& out, const char* name, const std::vector<TxnOp>& ops) {
  field(out, name);
  out += '[';
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (i > 0) out += ',';
    out += '{';
    if (const auto* r = std::get_if<RangeRequest>(&ops[i])) {
      field(out, "request_range");
      append_range(out, *r);
    } else if (const auto* p = std::get_if<PutRequest>(&ops[i])) {
      field(out, "request_put");
      append_put(out, *p);
    } else {
      field(out, "request_delete_range");
      append_delete(out, std::get<DeleteRequest>(ops[i]));
    }
    out += '}';
  }
  out += ']';
}

// ---- Reading ----

// An int64 field: the gateway writes them as strings; a number is taken too. Absent: 0.
bool read_int(const Value& object, std::string_view name, std::int64_t& out, std::string& error) {
  out = 0;
  const Value* v = find_member(object, name);
  if (v == nullptr) return true;
  if (v->IsString()) {
    const std::string_view s = string_of(*v);
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    if (ec == std::errc() && end == s.data() + s.size() && !s.empty()) return true;
  } else if (v->IsInt64()) {
    out = v->GetInt64();
    return true;
  }
  error = std::string("\"").append(name).append("\" is not a 64-bit integer");
  return false;
}

bool read_bool(const Value& object, std::string_view name, bool& out, std::string& error) {
  out = false;
  const Value* v = find_member(object, name);
  if (v == nullptr) return true;
  if (v->IsBool()) {
    out = v->GetBool();
    return true;
  }
  error = std::string("\"").append(name).append("\" is not a boolean");
  return false;
}

bool read_bytes(const Value& object, std::string_view name, std::string& out, std::string& error) {
  out.clear();
  const Value* v = find_member(object, name);
  if (v == nullptr) return true;
  if (v->IsString()) {
    auto decoded = base64_decode(string_of(*v));
    if (decoded) {
      out = std::move(decoded).value();
      return true;
    }
  }
  error = std::string("\"").append(name).append("\" is not base64");
  return false;
}

// The object member `name`, or null (absent: an empty message); error set if it is not an object.
const Value* read_object(const Value& object, std::string_view name, std::string& error) {
  const Value* v = find_member(object, name);
  if (v != nullptr && !v->IsObject()) {
    error = std::string("\"").append(name).append("\" is not an object");
    return nullptr;
  }
  return v;
}

bool read_revision(const Value& message, std::int64_t& revision, std::string& error) {
  revision = 0;
  const Value* header = read_object(message, "header", error);
  if (!error.empty()) return false;
  return header == nullptr || read_int(*header, "revision", revision, error);
}

bool read_kv(const Value& v, KeyValue& kv, std::string& error) {
  if (!v.IsObject()) {
    error = "a key-value is not an object";
    return false;
  }
  return read_bytes(v, "key", kv.key, error) && read_bytes(v, "value", kv.value, error) &&
         read_int(v, "create_revision", kv.create_revision, error) &&
         read_int(v, "mod_revision", kv.mod_revision, error) && read_int(v, "version", kv.version, error) &&
         read_int(v, "lease", kv.lease, error);
}

bool read_range(const Value& v, RangeResponse& out, std::string& error) {
  if (!read_revision(v, out.revision, error) || !read_int(v, "count", out.count, error) ||
      !read_bool(v, "more", out.more, error)) {
    return false;
  }
  const Value* kvs = find_member(v, "kvs");
  if (kvs == nullptr) return true;
  if (!kvs->IsArray()) {
    error = "\"kvs\" is not an array";
    return false;
  }
  out.kvs.resize(kvs->Size());
  for (rapidjson::SizeType i = 0; i < kvs->Size(); ++i) {
    if (!read_kv((*kvs)[i], out.kvs[i], error)) return false;
  }
  return true;
}

// Parses `body` as a JSON object and hands it to `read`; the error says what was wrong.
template <class T, class Read>
Decoded<T> decode_object(std::string_view body, Read read) {
  internal::ParsedJson json;
  if (!json.parse(body)) return DecodeError{std::string("not JSON: ").append(json.error_text())};
  if (!json.root().IsObject()) return DecodeError{"not a JSON object"};
  T out{};
  std::string error;
  if (!read(json.root(), out, error)) return DecodeError{std::move(error)};
  return out;
}

// A streamed message's {"result": {...}}.
const Value* stream_result(const Value& root, std::string& error) {
  const Value* result = read_object(root, "result", error);
  if (result == nullptr && error.empty()) error = "no \"result\"";
  return result;
}

bool read_txn_response(const Value& item, TxnResponse& out, std::string& error) {
  if (!item.IsObject()) {
    error = "a response is not an object";
    return false;
  }
  if (const Value* r = read_object(item, "response_range", error)) {
    RangeResponse range;
    if (!read_range(*r, range, error)) return false;
    out.responses.emplace_back(std::move(range));
  } else if (const Value* p = read_object(item, "response_put", error)) {
    PutResponse put;
    if (!read_revision(*p, put.revision, error)) return false;
    out.responses.emplace_back(put);
  } else if (const Value* d = read_object(item, "response_delete_range", error)) {
    DeleteResponse del;
    if (!read_revision(*d, del.revision, error) || !read_int(*d, "deleted", del.deleted, error)) return false;
    out.responses.emplace_back(del);
  } else {
    if (error.empty()) error = "a response of no known kind";
    return false;
  }
  return error.empty();
}

bool read_event(const Value& v, WatchEvent& event, std::string& error) {
  if (!v.IsObject()) {
    error = "an event is not an object";
    return false;
  }
  const Value* type = find_member(v, "type");
  if (type == nullptr || (type->IsString() && string_of(*type) == "PUT")) {
    event.type = WatchEvent::Type::put;
  } else if (type->IsString() && string_of(*type) == "DELETE") {
    event.type = WatchEvent::Type::del;
  } else {
    error = "an event's \"type\" is neither PUT nor DELETE";
    return false;
  }
  const Value* kv = read_object(v, "kv", error);
  if (kv == nullptr) {
    if (error.empty()) error = "an event has no \"kv\"";
    return false;
  }
  return read_kv(*kv, event.kv, error);
}

bool read_watch(const Value& root, WatchResponse& out, std::string& error) {
  if (const Value* e = find_member(root, "error")) {
    // The stream's end with an error: {"error": {"grpc_code", "message", ...}} (or a flat string).
    error = "the watch stream ended with an error";
    if (e->IsObject()) {
      if (const Value* m = find_member(*e, "message"); m != nullptr && m->IsString()) {
        error.append(": ").append(string_of(*m));
      }
    } else if (e->IsString()) {
      error.append(": ").append(string_of(*e));
    }
    return false;
  }
  const Value* result = stream_result(root, error);
  if (result == nullptr) return false;
  if (!read_revision(*result, out.revision, error) || !read_bool(*result, "created", out.created, error) ||
      !read_bool(*result, "canceled", out.canceled, error) ||
      !read_int(*result, "compact_revision", out.compact_revision, error)) {
    return false;
  }
  if (const Value* reason = find_member(*result, "cancel_reason"); reason != nullptr && reason->IsString()) {
    out.cancel_reason = string_of(*reason);
  }
  const Value* events = find_member(*result, "events");
  if (events == nullptr) return true;
  if (!events->IsArray()) {
    error = "\"events\" is not an array";
    return false;
  }
  out.events.resize(events->Size());
  for (rapidjson::SizeType i = 0; i < events->Size(); ++i) {
    if (!read_event((*events)[i], out.events[i], error)) return false;
  }
  return true;
}

}  // namespace

std::string prefix_end(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(end.back());
    if (last < 0xff) {
      ++last;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key: etcd's "\0" range end
}

std::string base64_encode(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

namespace {

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

}  // namespace

Decoded<std::string> base64_decode(std::string_view text) {
  // Only the canonical form, as the gateway writes it (Go's StdEncoding): a length that is a multiple
  // of 4, padding only at the end, and the bits padding leaves unused zero, so that every text
  // names one string. (EVP_DecodeBlock alone skips whitespace and ignores those bits.)
  if (text.size() % 4 != 0) return DecodeError{"base64 of a length that is not a multiple of 4"};
  const std::size_t padding = text.ends_with("==") ? 2 : text.ends_with('=') ? 1 : 0;
  const std::string_view digits = text.substr(0, text.size() - padding);
  for (char c : digits) {
    if (base64_value(c) < 0) return DecodeError{"not base64"};
  }
  if ((padding == 2 && (base64_value(digits.back()) & 0x0f) != 0) ||
      (padding == 1 && (base64_value(digits.back()) & 0x03) != 0)) {
    return DecodeError{"base64 whose padding bits are not zero"};
  }
  std::string out(text.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()), static_cast<int>(text.size()));
  if (n < 0) return DecodeError{"not base64"};
  out.resize(static_cast<std::size_t>(n) - padding);  // EVP_DecodeBlock counts padding as zero bytes
  return out;
}

std::string encode(const RangeRequest& request) {
  std::string out;
  append_range(out, request);
  return out;
}

std::string encode(const PutRequest& request) {
  std::string out;
  append_put(out, request);
  return out;
}

std::string encode(const DeleteRequest& request) {
  std::string out;
  append_delete(out, request);
  return out;
}

std::string encode(const TxnRequest& request) {
  std::string out = "{";
  field(out, "compare");
  out += '[';
  for (std::size_t i = 0; i < request.compare.size(); ++i) {
    if (i > 0) out += ',';
    append_compare(out, request.compare[i]);
  }
  out += ']';
  append_ops(out, "success", request.success);
  append_ops(out, "failure", request.failure);
  out += '}';
  return out;
}

std::string encode_lease_grant(std::int64_t ttl_seconds) {
  std::string out = "{";
  int_field(out, "TTL", ttl_seconds);
  out += '}';
  return out;
}

std::string encode_lease_id(std::int64_t id) {
  std::string out = "{";
  int_field(out, "ID", id);
  out += '}';
  return out;
}

std::string encode_compaction(std::int64_t revision) {
  std::string out = "{";
  int_field(out, "revision", revision);
  out += '}';
  return out;
}

std::string encode_watch_create(std::string_view key, std::string_view range_end, std::int64_t start_revision) {
  std::string out = "{\"create_request\":{";
  bytes_field(out, "key", key);
  if (!range_end.empty()) bytes_field(out, "range_end", range_end);
  if (start_revision != 0) int_field(out, "start_revision", start_revision);
  out += "}}";
  return out;
}

Decoded<RangeResponse> decode_range(std::string_view body) {
  return decode_object<RangeResponse>(body, read_range);
}

Decoded<PutResponse> decode_put(std::string_view body) {
  return decode_object<PutResponse>(body, [](const Value& v, PutResponse& out, std::string& error) {
    return read_revision(v, out.revision, error);
  });
}

Decoded<DeleteResponse> decode_delete(std::string_view body) {
  return decode_object<DeleteResponse>(body, [](const Value& v, DeleteResponse& out, std::string& error) {
    return read_revision(v, out.revision, error) && read_int(v, "deleted", out.deleted, error);
  });
}

Decoded<TxnResponse> decode_txn(std::string_view body) {
  return decode_object<TxnResponse>(body, [](const Value& v, TxnResponse& out, std::string& error) {
    if (!read_revision(v, out.revision, error) || !read_bool(v, "succeeded", out.succeeded, error)) return false;
    const Value* responses = find_member(v, "responses");
    if (responses == nullptr) return true;
    if (!responses->IsArray()) {
      error = "\"responses\" is not an array";
      return false;
    }
    for (const Value& item : responses->GetArray()) {
      if (!read_txn_response(item, out, error)) return false;
    }
    return true;
  });
}

Decoded<LeaseGrant> decode_lease_grant(std::string_view body) {
  return decode_object<LeaseGrant>(body, [](const Value& v, LeaseGrant& out, std::string& error) {
    if (!read_int(v, "ID", out.id, error) || !read_int(v, "TTL", out.ttl, error)) return false;
    if (out.id != 0 && out.ttl > 0) return true;
    error = "a lease grant without an ID or a TTL";
    return false;
  });
}

Decoded<std::int64_t> decode_lease_keepalive(std::string_view body) {
  return decode_object<std::int64_t>(body, [](const Value& v, std::int64_t& ttl, std::string& error) {
    const Value* result = stream_result(v, error);
    return result != nullptr && read_int(*result, "TTL", ttl, error);
  });
}

Decoded<std::int64_t> decode_header_revision(std::string_view body) {
  return decode_object<std::int64_t>(body, read_revision);
}

Decoded<WatchResponse> decode_watch_line(std::string_view line) {
  return decode_object<WatchResponse>(line, read_watch);
}

GatewayError decode_error(std::string_view body) {
  // Two shapes: {"error","message","code"} from a unary route, and {"error":{"grpc_code","message",
  // ...}} from a streamed one (keepalive, watch).
  GatewayError out;
  internal::ParsedJson json;
  if (json.parse(body) && json.root().IsObject()) {
    const Value* fields = &json.root();
    const char* code_name = "code";
    if (const Value* nested = find_member(json.root(), "error"); nested != nullptr && nested->IsObject()) {
      fields = nested;
      code_name = "grpc_code";
    }
    std::int64_t code = 0;
    std::string ignored;
    if (read_int(*fields, code_name, code, ignored) && code >= 0 && code < 100) out.code = static_cast<int>(code);
    const Value* message = find_member(*fields, "message");
    if (message == nullptr) message = find_member(*fields, "error");
    if (message != nullptr && message->IsString()) out.message = string_of(*message);
  }
  if (out.message.empty()) out.message = std::string(body.substr(0, 200));
  return out;
}

}  // namespace hf3fs_meta::server::ha
