// Client: the typed SDK for the HF3FS metadata service. Every call returns Result<T>; the client
// validates input before sending, classifies failures, and (policies.hpp) retries, backs off and
// re-initializes a registered rank the server forgot. Safe to share between threads.
//
// Usage:
//
//   hf3fs_meta::Client client({.base_url = "http://meta:18000"});
//   // Once at start-up: initialize the rank and register it, so that the client initializes it again
//   // by itself if the server restarts (or is cleared) and answers "Rank 3 not initialized".
//   BOOST_OUTCOME_TRY(client.ensure_initialized(rank, num_pages));
//   auto pages = client.allocate(rank, {"key1", "key2"}); // a page per key, in order; -1 for none
//   if (!pages) {
//     const hf3fs_meta::Error& e = pages.error();     // e.code == errc::..., e.message() for people
//   }
//   // ... write the blocks, then:
//   auto done = client.confirm_write(rank, {{key, page}}, /*pages_to_release=*/{});
//   if (!done && done.error().code == hf3fs_meta::errc::rank_not_initialized && done.error().reinitialized) {
//     // The server lost the rank; the client restored it, but these pages belong to the lost
//     // state: allocate again and rewrite.
//   }
//
// - Refused before sending, as errc::invalid_argument (nothing sent, no request id, no observer
//   event): empty keys, duplicate keys in allocate / confirm_write, a page named twice, negative
//   pages, a worker num_pages <= 0. Error::detail names the field and index.
// - A call makes up to RetryPolicy::max_attempts() attempts within its deadline (CallOptions
//   overrides it), with one X-Request-Id for all of them. What is repeated: docs/design.md, "Retries".
//   Error::attempts, ::stop_reason and ::request_id tell what happened; the observer sees each step.
// - register_rank() only records the rank; its num_pages is checked when a restore needs it.
// - ClientOptions::endpoints: the members of a highly available service; a member that is not the
//   leader sends the call to the one it names, or to the next endpoint (docs/design.md, "Endpoints").
// - ClientOptions::namespace_name: every call acts in that namespace, restores included; the ranks a
//   client registered are its namespace's (each client has one namespace, so two clients in two
//   namespaces restore each their own rank 0).
// - Result<T>::value() throws std::system_error carrying Error::message() on failure.
// - Copies share one connection. A moved-from Client may only be destroyed or assigned to.
// - Unit tests of code that takes a Client: Client(std::make_shared<hf3fs_meta_mocks::MockConnection>())
//   (<hf3fs_meta/mocks/mock_connection.hpp>; examples/mock_connection_test.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hf3fs_meta/connection.hpp"
#include "hf3fs_meta/error.hpp"
#include "hf3fs_meta/types.hpp"

namespace hf3fs_meta {

class Client {
 public:
  // A connection made from `options` (make_connection).
  explicit Client(ClientOptions options = {});
  // Any connection: tests give a hf3fs_meta_mocks::MockConnection. Throws std::invalid_argument if null.
  explicit Client(std::shared_ptr<Connection> connection);

  // POST /rank/{rank}/initialize -> the server's message.
  Result<std::string> initialize(Rank rank, std::int64_t num_pages, Role role = Role::worker,
                                 const CallOptions& call = {}) {
    return connection_->initialize(rank, num_pages, role, call);
  }
  // Sends the initialize and registers the rank, so that the client restores it when the server
  // says "not initialized". A scheduler's initialize registers nothing (there is nothing to
  // restore) and leaves a worker's registration of the same rank as it is.
  Result<std::string> ensure_initialized(Rank rank, std::int64_t num_pages, Role role = Role::worker,
                                         const CallOptions& call = {}) {
    return connection_->ensure_initialized(rank, num_pages, role, call);
  }
  // Registers without sending: the first initialize goes out when the server says "not initialized".
  void register_rank(Rank rank, std::int64_t num_pages, Role role = Role::worker) {
    connection_->register_rank(rank, num_pages, role);
  }

  // POST /keys/batch_allocate -> the page given to each key, in request order; kNoPage for none.
  // A key given as a string has the empty prefix key: allocate(3, {"a", "b"}).
  Result<std::vector<Page>> allocate(Rank rank, const std::vector<BlockKey>& keys, const CallOptions& call = {}) {
    return connection_->allocate(rank, keys, call);
  }
  // POST /keys/confirm_write.
  Result<void> confirm_write(Rank rank, const std::vector<Confirmation>& confirmations,
                             const std::vector<Page>& pages_to_release = {}, const CallOptions& call = {}) {
    return connection_->confirm_write(rank, confirmations, pages_to_release, call);
  }
  // POST /keys/batch_exists -> true for each complete key.
  Result<std::vector<bool>> batch_exists(const std::vector<std::string>& keys, const CallOptions& call = {}) {
    return connection_->batch_exists(keys, call);
  }
  // POST /keys/get_locations -> the rank's page of each complete key, else nullopt.
  Result<std::vector<std::optional<Page>>> get_locations(Rank rank, const std::vector<std::string>& keys,
                                                         const CallOptions& call = {}) {
    return connection_->get_locations(rank, keys, call);
  }
  // POST /keys/delete (an extension of the reference server) -> true for each key that existed.
  // Not repeated after an ambiguous failure: a repeat could delete the key saved again meanwhile.
  Result<std::vector<bool>> delete_keys(const std::vector<std::string>& keys, const CallOptions& call = {}) {
    return connection_->delete_keys(keys, call);
  }
  // GET /stats (an extension of the reference server): pages by state per rank, keys, lifecycle counters.
  Result<StateStats> stats(const CallOptions& call = {}) { return connection_->stats(call); }
  // POST /clear: the server forgets every rank and key of this client's namespace
  // (ClientOptions::namespace_name; without one, of the default namespace, which is all there is on a
  // server without namespaces).
  Result<void> clear(const CallOptions& call = {}) { return connection_->clear(call); }
  // POST /rank/{rank}/drop (extension of the reference server): the rank, its pages and its keys'
  // mappings on it go; keys left with no mapping go. For a redeploy with other num_pages or fewer
  // ranks against a durable server (README, "Durability"). A rank this client registered stays
  // registered (with its num_pages): a later call meeting "not initialized" initializes it again.
  Result<DropOutcome> drop_rank(Rank rank, const CallOptions& call = {}) { return connection_->drop_rank(rank, call); }
  // GET /namespaces (extension of the reference server; docs/protocol.md, "Namespaces"): every
  // namespace by name, the default one included, with its ranks, pages and keys. For an operator:
  // a server with --tenants-file refuses a tenant's token (403, errc::unexpected_status).
  Result<std::vector<NamespaceSummary>> namespaces(const CallOptions& call = {}) {
    return connection_->namespaces(call);
  }
  // POST /namespaces/{name}/drop (extension): the namespace, its ranks, pages and keys go at once;
  // dropped is false for a name that does not exist. `name` is checked before sending
  // (errc::invalid_argument); the default namespace cannot be dropped (the server refuses it: clear()
  // empties it). Never repeated after an ambiguous failure: a repeat could drop the namespace
  // created again meanwhile. For an operator, as namespaces().
  Result<NamespaceDropOutcome> drop_namespace(std::string_view name, const CallOptions& call = {}) {
    return connection_->drop_namespace(name, call);
  }
  // POST /keys/status (extension): what the server knows of each key in this client's namespace,
  // to say why batch_exists answered false: the ranks that confirmed it and the tp_world_size it
  // needs (nullopt: an unknown key), beside how many ranks are initialized now. A read: it takes no
  // lease and moves no key's recency, so it changes no eviction.
  Result<KeyStatusAnswer> key_status(const std::vector<std::string>& keys, const CallOptions& call = {}) {
    return connection_->key_status(keys, call);
  }
  // POST a body as it is and classify the answer (for tools and tests).
  Result<RawResponse> raw(std::string_view path, std::string_view body, const CallOptions& call = {}) {
    return connection_->raw(path, body, call);
  }

 private:
  std::shared_ptr<Connection> connection_;
};

}  // namespace hf3fs_meta
