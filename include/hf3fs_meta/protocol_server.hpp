// The server's half of the wire codec (<hf3fs_meta/protocol.hpp> has the shared part and the
// client's): strict request decoders, and the answers as FastAPI renders them. In hf3fs_meta::service.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hf3fs_meta/protocol.hpp"
#include "hf3fs_meta/state.hpp"  // KeyInfo (key_status's answer)
#include "hf3fs_meta/stats.hpp"
#include "hf3fs_meta/types.hpp"

namespace hf3fs_meta::protocol {

// ---- Server side: strict request decoders ----
// A refusal carries the exact detail text to answer with 400: vLLM's own text where vLLM answers
// 400 ("Invalid request format: need 'rank' and 'keys'", ...), else one naming the field and index.
struct InitializeRequest {
  std::int64_t num_pages = 0;  // unchecked for role scheduler (vLLM ignores it)
  Role role = Role::worker;
};
struct AllocateRequest {
  Rank rank = 0;
  std::vector<BlockKey> keys;
};
struct ConfirmWriteRequest {
  Rank rank = 0;
  std::vector<Confirmation> confirmations;
  std::vector<Page> pages_to_release;  // every entry's page, bare or keyed
  // Extension: the entries sent as `[key, page]` (kKeyedReleaseHeader), by ascending index; vLLM's
  // clients send bare pages only, and this stays empty.
  std::vector<ReleaseKey> release_keys;
};
struct BatchExistsRequest {
  std::vector<std::string> keys;
};
struct GetLocationsRequest {
  Rank rank = 0;
  std::vector<std::string> keys;
};

Decoded<InitializeRequest> decode_initialize_request(std::string_view body);
Decoded<AllocateRequest> decode_allocate_request(std::string_view body);
Decoded<ConfirmWriteRequest> decode_confirm_write_request(std::string_view body);
Decoded<BatchExistsRequest> decode_batch_exists_request(std::string_view body);
Decoded<GetLocationsRequest> decode_get_locations_request(std::string_view body);

// The same two requests decoded without a string per key, for the server's hot path (about 1,250
// keys per exists call): each key is a view into the body when it has no escape, else into
// `buffer`, the copy of the body that the full parser reads in place. So the views live as long as
// both the body and this structure (until the next decode into it). Reusing one structure per
// thread makes a decode allocate nothing in the steady state. `rank` is 0 for batch_exists.
struct KeyListRequest {
  Rank rank = 0;
  std::vector<std::string_view> keys;
  std::string buffer;  // the full parser's copy of the body (a body with escapes, for one)
};
// nullopt on success (`out` filled), else the refusal, exactly as the owning decoders above.
std::optional<DecodeError> decode_batch_exists_request(std::string_view body, KeyListRequest& out);
std::optional<DecodeError> decode_get_locations_request(std::string_view body, KeyListRequest& out);
inline std::optional<DecodeError> decode_delete_keys_request(std::string_view body, KeyListRequest& out) {
  return decode_batch_exists_request(body, out);
}
// POST /keys/status takes delete_keys' body ({"keys": [...]}), refused alike.
inline std::optional<DecodeError> decode_key_status_request(std::string_view body, KeyListRequest& out) {
  return decode_batch_exists_request(body, out);
}

// ---- Server side: response encoders (compact, as FastAPI renders them) ----
std::string encode_message(std::string_view message);  // {"message":"..."}
std::string encode_detail(std::string_view detail);    // {"detail":"..."}
std::string encode_allocate_response(Rank rank, std::span<const BlockKey> keys, std::span<const Page> pages);
std::string encode_drop_response(Rank rank, const DropOutcome& outcome);
std::string encode_batch_exists_response(const std::vector<bool>& exists);
std::string encode_delete_keys_response(const std::vector<bool>& deleted);
std::string encode_stats_response(const StateStats& stats);
std::string encode_get_locations_response(std::span<const std::optional<Page>> locations);
// Namespaces (docs/protocol.md, "Namespaces"):
// {"namespaces":[{"name":"default","ranks":[0,1],"pages":16,"keys":5},...]}, in the order given.
std::string encode_namespaces_response(std::span<const NamespaceSummary> namespaces);
// {"namespace":"m1","dropped":true,"ranks":2,"pages":16,"keys_removed":5}; `name` is a valid one.
std::string encode_drop_namespace_response(std::string_view name, const NamespaceDropOutcome& outcome);
// {"ranks_initialized":3,"status":[{"ranks":[0,1],"tp_world_size":3,"complete":false},null]}: a key's
// ranks are those of its pages (sorted by rank, as key_status gives them); null: an unknown key.
std::string encode_key_status_response(std::size_t ranks_initialized, std::span<const std::optional<KeyInfo>> status);
// FastAPI's pydantic-2 422 body for a path rank that is not an integer.
std::string encode_path_rank_validation_error(std::string_view input);

}  // namespace hf3fs_meta::protocol
