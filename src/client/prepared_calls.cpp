// Each typed call of the default connection, prepared: its input checked, its request encoded, its
// answer's decoder, and what the client keeps of its result. Run blocking (client.cpp) or called
// back (async_client.cpp), alike.
#include "client/client_impl.hpp"

namespace hf3fs_meta::internal {

Prepared<std::string> ClientImpl::prepare_initialize(Rank rank, std::int64_t num_pages, Role role,
                                                     const CallOptions& call) {
  return initialize_with(rank, num_pages, role, spec(Route::initialize, std::nullopt, call));
}

Prepared<std::string> ClientImpl::prepare_ensure_initialized(Rank rank, std::int64_t num_pages, Role role,
                                                             const CallOptions& call) {
  // A scheduler's initialize changes nothing on the server, so there is nothing to restore: it
  // neither registers the rank nor replaces a worker's registration of it.
  if (role != Role::worker) return prepare_initialize(rank, num_pages, role, call);
  // Refused before anything is registered: a rank that could never be initialized is not one.
  if (auto e = check_initialize(rank, num_pages, role)) return Prepared<std::string>::refusal(std::move(*e));
  // Registered first, then sent: a worker that starts during an outage (its first initialize fails)
  // is still restored when the server comes back and says "not initialized".
  register_rank(rank, num_pages, role);
  auto p = prepare_initialize(rank, num_pages, role, call);
  // The server refuses these parameters for good: restoring with them could never succeed.
  p.keep = [this, rank](const Result<std::string>& result) {
    if (!result && result.error().code == errc::invalid_initialization) unregister_rank(rank);
  };
  return p;
}

Prepared<std::vector<Page>> ClientImpl::prepare_allocate(Rank rank, const std::vector<BlockKey>& keys,
                                                         const CallOptions& call) {
  constexpr auto route = Route::batch_allocate;
  if (auto e = check_allocate(keys)) return Prepared<std::vector<Page>>::refusal(std::move(*e));
  Prepared<std::vector<Page>> p{std::nullopt, spec(route, rank, call),
                                request_for(route, protocol::encode_allocate_request(rank, keys)),
                                [&keys](const HttpResponse& r) { return protocol::decode_allocate_response(r.body, keys); }};
  // Remembered only for a server that takes keyed releases: nothing to keep for any other.
  p.keep = [this, rank, &keys](const Result<std::vector<Page>>& pages) {
    if (pages && keyed_releases.load(std::memory_order_relaxed)) page_keys.remember(rank, keys, pages.value());
  };
  return p;
}

Prepared<void> ClientImpl::prepare_confirm_write(Rank rank, const std::vector<Confirmation>& confirmations,
                                                 const std::vector<Page>& pages_to_release, const CallOptions& call) {
  constexpr auto route = Route::confirm_write;
  if (auto e = check_confirm_write(confirmations, pages_to_release)) return Prepared<void>::refusal(std::move(*e));
  // A page this client was allocated is released as [key, page] to a server that takes keyed
  // releases, so that a late release cannot free the page after it went to another key.
  std::vector<ReleaseKey> release_keys;
  if (!pages_to_release.empty() && keyed_releases.load(std::memory_order_relaxed)) {
    release_keys = page_keys.release_keys(rank, pages_to_release);
  }
  Prepared<void> p{
      std::nullopt, spec(route, rank, call, !pages_to_release.empty()),
      request_for(route, protocol::encode_confirm_write_request(rank, confirmations, pages_to_release, release_keys)),
      no_body};
  p.keep = [this, rank, &confirmations, &pages_to_release](const Result<void>& done) {
    if (done) page_keys.forget(rank, confirmations, pages_to_release);
  };
  return p;
}

Prepared<std::vector<bool>> ClientImpl::prepare_batch_exists(const std::vector<std::string>& keys,
                                                             const CallOptions& call) {
  return key_call<std::vector<bool>>(
      Route::batch_exists, std::nullopt, keys, call, [&] { return protocol::encode_batch_exists_request(keys); },
      protocol::decode_batch_exists_response);
}

Prepared<std::vector<std::optional<Page>>> ClientImpl::prepare_get_locations(Rank rank,
                                                                             const std::vector<std::string>& keys,
                                                                             const CallOptions& call) {
  return key_call<std::vector<std::optional<Page>>>(
      Route::get_locations, rank, keys, call, [&] { return protocol::encode_get_locations_request(rank, keys); },
      protocol::decode_get_locations_response);
}

Prepared<std::vector<bool>> ClientImpl::prepare_delete_keys(const std::vector<std::string>& keys,
                                                            const CallOptions& call) {
  return key_call<std::vector<bool>>(
      Route::delete_keys, std::nullopt, keys, call, [&] { return protocol::encode_delete_keys_request(keys); },
      protocol::decode_delete_keys_response);
}

Prepared<KeyStatusAnswer> ClientImpl::prepare_key_status(const std::vector<std::string>& keys,
                                                         const CallOptions& call) {
  return key_call<KeyStatusAnswer>(
      Route::key_status, std::nullopt, keys, call, [&] { return protocol::encode_key_status_request(keys); },
      protocol::decode_key_status_response);
}

Prepared<StateStats> ClientImpl::prepare_stats(const CallOptions& call) {
  constexpr auto route = Route::stats;
  return {std::nullopt, spec(route, std::nullopt, call), request_for(route, std::string()),
          [](const HttpResponse& r) { return protocol::decode_stats_response(r.body); }};
}

Prepared<void> ClientImpl::prepare_clear(const CallOptions& call) {
  constexpr auto route = Route::clear;
  Prepared<void> p{std::nullopt, spec(route, std::nullopt, call), request_for(route, std::string()), no_body};
  p.keep = [this](const Result<void>& done) {
    if (done) page_keys.clear();
  };
  return p;
}

Prepared<DropOutcome> ClientImpl::prepare_drop_rank(Rank rank, const CallOptions& call) {
  constexpr auto route = Route::drop_rank;
  Prepared<DropOutcome> p{std::nullopt, spec(route, rank, call), request_for(route, std::string(), rank),
                          [](const HttpResponse& r) { return protocol::decode_drop_response(r.body); }};
  p.keep = [this, rank](const Result<DropOutcome>& dropped) {
    if (dropped) page_keys.forget_rank(rank);
  };
  return p;
}

Prepared<RawResponse> ClientImpl::prepare_raw(std::string_view path, std::string_view body, const CallOptions& call) {
  return {std::nullopt, spec(Route::not_found, std::nullopt, call),
          HttpRequest{std::string(path), std::string(body), {}},
          [](const HttpResponse& r) -> protocol::Decoded<RawResponse> {
            return RawResponse{r.status, r.content_type, r.body};
          }};
}

Prepared<std::vector<NamespaceSummary>> ClientImpl::prepare_namespaces(const CallOptions& call) {
  constexpr auto route = Route::namespaces;
  return {std::nullopt, spec(route, std::nullopt, call), request_for(route, std::string()),
          [](const HttpResponse& r) { return protocol::decode_namespaces_response(r.body); }};
}

Prepared<NamespaceDropOutcome> ClientImpl::prepare_drop_namespace(std::string_view name, const CallOptions& call) {
  constexpr auto route = Route::drop_namespace;
  if (auto e = check_namespace_name(route_info(route).operation, name)) {
    return Prepared<NamespaceDropOutcome>::refusal(std::move(*e));
  }
  return {std::nullopt, spec(route, std::nullopt, call),
          HttpRequest{request_path(route, name), std::string(), {}, std::string(route_info(route).method)},
          [name](const HttpResponse& r) { return protocol::decode_drop_namespace_response(r.body, name); }};
}

}  // namespace hf3fs_meta::internal
