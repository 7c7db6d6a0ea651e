// The wire codec of the HF3FS metadata protocol (docs/protocol.md), shared by the client and the server
// so that the two cannot drift: request and response bodies <-> typed values, and the parser of
// FastAPI error details. RapidJSON stays inside the implementation.
#pragma once

// This header: what both sides share and the client's half (hf3fs_meta::protocol). The server's half
// (strict request decoders, answer encoders): <hf3fs_meta/protocol_server.hpp>, in hf3fs_meta::service.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/outcome/result.hpp>

#include "hf3fs_meta/error.hpp"
#include "hf3fs_meta/stats.hpp"
#include "hf3fs_meta/types.hpp"

namespace hf3fs_meta::protocol {

// The routes' paths and their other facts: routes.hpp. POST /keys/delete takes {"keys": [...]} and
// answers {"deleted": [bool, ...]}; GET /stats answers the StateStats fields below by name, with
// "ranks": [{"rank": R, <RankStats fields>, "kept_on_release": N}, ...] (docs/protocol.md, "Stats").

// The names of the figures in /stats (and in the server's metrics).
struct RankStatsField {
  std::string_view name;
  std::int64_t RankStats::*member;
};
inline constexpr RankStatsField kRankStatsFields[] = {
    {"num_pages", &RankStats::num_pages}, {"free", &RankStats::free},         {"allocated", &RankStats::allocated},
    {"mapped", &RankStats::mapped},       {"orphaned", &RankStats::orphaned}, {"draining", &RankStats::draining},
};
// A rank's one counter (the others above are levels): releases refused because the page was mapped.
inline constexpr std::string_view kKeptOnReleaseField = "kept_on_release";
struct StateStatsField {
  std::string_view name;
  std::uint64_t StateStats::*member;
  bool counter;  // counted since the start (a Prometheus counter), else a level (a gauge)
  std::string_view help;  // /metrics' HELP line
};
inline constexpr StateStatsField kStateStatsFields[] = {
    {"keys_complete", &StateStats::keys_complete, false, "Keys confirmed on as many ranks as their tp_world_size."},
    {"keys_incomplete", &StateStats::keys_incomplete, false, "Keys confirmed on fewer or more ranks than that."},
    {"keys_leased", &StateStats::keys_leased, false,
     "Keys under a read lease (deleted ones, and pages orphaned under a lease, still draining included)."},
    {"key_records", &StateStats::key_records, false, "Key records held (live, draining and free for reuse)."},
    {"evicted_keys", &StateStats::evicted_keys, true, "Keys evicted by --eviction lru."},
    {"deleted_keys", &StateStats::deleted_keys, true, "Keys deleted by POST /keys/delete."},
    {"reclaimed_keys", &StateStats::reclaimed_keys, true, "Incomplete keys dropped by --allocation-ttl-ms."},
    {"reclaimed_allocated_pages", &StateStats::reclaimed_allocated_pages, true,
     "Pages allocated and never confirmed, returned by --allocation-ttl-ms."},
    {"reclaimed_orphaned_pages", &StateStats::reclaimed_orphaned_pages, true,
     "Orphaned pages returned by --allocation-ttl-ms."},
};

// A decoder's failure: what is wrong, naming the field and index.
struct DecodeError {
  std::string message;
};
template <class T>
using Decoded = boost::outcome_v2::result<T, DecodeError, boost::outcome_v2::policy::terminate>;

// ---- Client side: request encoders ----
// Compact JSON (no spaces), UTF-8 kept as is. vLLM's own client sends `{"rank": 3, "keys": [...]}`
// with spaces and \u-escaped non-ASCII; servers read both alike.
std::string encode_initialize_request(std::int64_t num_pages, Role role);
std::string encode_allocate_request(Rank rank, std::span<const BlockKey> keys);
std::string encode_confirm_write_request(Rank rank, std::span<const Confirmation> confirmations,
                                         std::span<const Page> pages_to_release);
// The same, with keyed releases (routes.hpp, kKeyedReleaseHeader): pages_to_release[k.index] is sent
// as [k.key, page] for each k in `release_keys`, the others bare. `release_keys` in the shape the
// server decodes them into and MetadataState::confirm_write takes: by ascending index, each below
// pages_to_release.size() (from an entry out of that order on, the pages are sent bare).
std::string encode_confirm_write_request(Rank rank, std::span<const Confirmation> confirmations,
                                         std::span<const Page> pages_to_release,
                                         std::span<const ReleaseKey> release_keys);
std::string encode_batch_exists_request(std::span<const std::string> keys);
std::string encode_get_locations_request(Rank rank, std::span<const std::string> keys);
// POST /keys/delete's body is batch_exists' ({"keys": [...]}).
inline std::string encode_delete_keys_request(std::span<const std::string> keys) {
  return encode_batch_exists_request(keys);
}
// POST /keys/status' body is the same.
inline std::string encode_key_status_request(std::span<const std::string> keys) {
  return encode_batch_exists_request(keys);
}

// ---- Client side: success decoders, checking the answer against what was sent ----
Decoded<std::string> decode_initialize_response(std::string_view body);  // the "message"
// {"rank":R,"dropped":B,"pages":N,"mappings":M,"keys_removed":K} (extension: POST /rank/{rank}/drop).
Decoded<DropOutcome> decode_drop_response(std::string_view body);
// The page of each sent key, in request order; the answer must name the key sent at each index.
Decoded<std::vector<Page>> decode_allocate_response(std::string_view body, std::span<const BlockKey> sent);
Decoded<std::vector<bool>> decode_batch_exists_response(std::string_view body, std::size_t expected);
Decoded<std::vector<std::optional<Page>>> decode_get_locations_response(std::string_view body,
                                                                        std::size_t expected);
Decoded<std::vector<bool>> decode_delete_keys_response(std::string_view body, std::size_t expected);
Decoded<StateStats> decode_stats_response(std::string_view body);
// Namespaces (extensions; docs/protocol.md, "Namespaces"). GET /namespaces: each entry's name a
// valid one, its ranks integers, its pages and keys counts.
Decoded<std::vector<NamespaceSummary>> decode_namespaces_response(std::string_view body);
// POST /namespaces/{name}/drop: the answer must name the namespace sent.
Decoded<NamespaceDropOutcome> decode_drop_namespace_response(std::string_view body, std::string_view sent);
// POST /keys/status: one entry (an object or null) per key sent.
Decoded<KeyStatusAnswer> decode_key_status_response(std::string_view body, std::size_t expected);

// ---- Client side: classifying a non-2xx answer from its status and body alone ----
// Only for non-2xx answers (a 2xx is not an error; given one, it says unexpected_status). The
// content type is not trusted: the body decides. A body with no usable detail (not JSON, no or an
// empty "detail") is kept as the detail, cut to about 200 bytes.
struct ClassifiedError {
  errc code = errc::server_error;
  std::string detail;        // the detail string; a 422 list rendered as "loc: msg; ..."; else the body
  std::string prefix;        // "Allocation failed", "Confirmation failed", ... (empty if none)
  std::string cause;         // the text after the prefix, or the whole detail without one
  std::optional<Rank> rank;  // parsed from "Rank N not initialized" / "Confirmation failed: N"
  // A 503 whose detail starts with kNotLeaderDetailPrefix (routes.hpp): a member that is not the
  // leader, which applied nothing.
  bool not_leader = false;
};
ClassifiedError classify_error(int status, std::string_view content_type, std::string_view body);

// ---- Both sides ----
// Parses a path segment as the reference server accepts a rank: a plain decimal 64-bit integer
// (optional leading '-'); nullopt otherwise (the server answers 422). The client checks its ranks with it.
std::optional<Rank> parse_path_rank(std::string_view segment) noexcept;

}  // namespace hf3fs_meta::protocol
