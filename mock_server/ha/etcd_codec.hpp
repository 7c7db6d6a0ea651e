// etcd v3's JSON gateway (etcd 3.4: POST /v3/kv/range, /v3/kv/txn, /v3/lease/grant, /v3/watch, ...)
// as values: what --ha-etcd sends and what it reads back. No C++ etcd client is packaged for
// Debian, and the gateway is plain HTTP/JSON, which the server already speaks with libcurl and
// RapidJSON.
//
// The gateway's conventions (grpc-gateway over etcd's protobufs), checked against etcd 3.4.23:
// keys and values are base64; int64 fields are JSON strings ("revision":"5"); a field equal to
// its zero value is left out (a Txn whose compare failed has no "succeeded"; a keepalive of a lease
// that has expired answers no "TTL"; a PUT event has no "type"); a streamed answer (watch,
// keepalive) wraps each message in {"result": ...}; an error is {"error","message","code"} with a
// gRPC status code and an HTTP status.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <boost/outcome/result.hpp>

namespace hf3fs_meta::server::ha {

// What was wrong with a text a decoder refused (for a log line).
struct DecodeError {
  std::string message{};
};
template <class T>
using Decoded = boost::outcome_v2::result<T, DecodeError, boost::outcome_v2::policy::terminate>;

// Members are braced so that an aggregate initializer may leave the later ones out (GCC's
// -Wmissing-field-initializers).
struct KeyValue {
  std::string key{};
  std::string value{};
  std::int64_t create_revision{0};
  std::int64_t mod_revision{0};
  std::int64_t version{0};
  std::int64_t lease{0};
};

// A Txn's condition on one key (etcd's Compare). create_revision == 0 means "the key does not exist".
struct Compare {
  enum class Target : std::uint8_t { version, create, mod, value, lease };
  enum class Result : std::uint8_t { equal, greater, less, not_equal };
  std::string key{};
  Target target = Target::create;
  Result result = Result::equal;
  std::int64_t number{0};  // for version, create, mod and lease
  std::string value{};        // for value
};

struct RangeRequest {
  std::string key{};
  std::string range_end{};  // empty: `key` alone; prefix_end(p): every key starting with p
  std::int64_t limit{0};     // 0: no limit
  std::int64_t revision{0};  // 0: the newest
  bool keys_only{false};
};

struct PutRequest {
  std::string key{};
  std::string value{};
  std::int64_t lease{0};  // 0: no lease
};

struct DeleteRequest {
  std::string key{};
  std::string range_end{};
};

using TxnOp = std::variant<RangeRequest, PutRequest, DeleteRequest>;

struct TxnRequest {
  std::vector<Compare> compare;
  std::vector<TxnOp> success;
  std::vector<TxnOp> failure;
};

struct RangeResponse {
  std::int64_t revision{0};  // the store's revision when it answered
  std::vector<KeyValue> kvs;
  std::int64_t count{0};
  bool more = false;
};

struct PutResponse {
  std::int64_t revision{0};
};

struct DeleteResponse {
  std::int64_t revision{0};
  std::int64_t deleted{0};
};

struct TxnResponse {
  std::int64_t revision{0};
  bool succeeded = false;
  // The answers of the branch that ran, in its order: a range's kvs, a put's nothing, a delete's count.
  std::vector<std::variant<RangeResponse, PutResponse, DeleteResponse>> responses;
};

struct LeaseGrant {
  std::int64_t id{0};
  std::int64_t ttl{0};  // seconds
};

struct WatchEvent {
  enum class Type : std::uint8_t { put, del };
  Type type = Type::put;
  KeyValue kv;
};

// One message of a watch's stream.
struct WatchResponse {
  std::int64_t revision{0};
  bool created = false;
  bool canceled = false;
  std::int64_t compact_revision{0};  // canceled because the start revision was compacted
  std::string cancel_reason{};
  std::vector<WatchEvent> events;
};

// An answer that is not a success: etcd's gRPC status code and message.
struct GatewayError {
  int code = 0;
  std::string message{};
};

// The end of the range of every key starting with `prefix` (etcd's "prefix end": the prefix with
// its last byte below 0xff incremented, the bytes after it dropped).
std::string prefix_end(std::string_view prefix);

std::string base64_encode(std::string_view bytes);
Decoded<std::string> base64_decode(std::string_view text);

// Request bodies.
std::string encode(const RangeRequest& request);
std::string encode(const PutRequest& request);
std::string encode(const DeleteRequest& request);
std::string encode(const TxnRequest& request);
std::string encode_lease_grant(std::int64_t ttl_seconds);
std::string encode_lease_id(std::int64_t id);  // keepalive and revoke
std::string encode_compaction(std::int64_t revision);
std::string encode_watch_create(std::string_view key, std::string_view range_end, std::int64_t start_revision);

// Answer bodies (a 200's).
Decoded<RangeResponse> decode_range(std::string_view body);
Decoded<PutResponse> decode_put(std::string_view body);
Decoded<DeleteResponse> decode_delete(std::string_view body);
Decoded<TxnResponse> decode_txn(std::string_view body);
Decoded<LeaseGrant> decode_lease_grant(std::string_view body);
// A keepalive's answer: the lease's remaining TTL in seconds; 0 when the lease is gone.
Decoded<std::int64_t> decode_lease_keepalive(std::string_view body);
// The store's revision of any answer with a header (revoke, compaction).
Decoded<std::int64_t> decode_header_revision(std::string_view body);
// One line of a watch's stream: {"result": {...}}, or {"error": {...}} as the stream's last.
Decoded<WatchResponse> decode_watch_line(std::string_view line);
// Any error answer; a body that is not one gives code 0 and the body's start as the message.
GatewayError decode_error(std::string_view body);

}  // namespace hf3fs_meta::server::ha
