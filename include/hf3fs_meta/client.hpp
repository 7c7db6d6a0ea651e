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
//   auto pages = client.allocate(rank, keys);          // one Allocation per key, page -1 for none
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
//   overrides it), with one X-Request-Id for all of them. What is repeated: DESIGN.md, "Retries".
//   Error::attempts, ::stop_reason and ::request_id tell what happened; the observer sees each step.
// - register_rank() only records the rank; its num_pages is checked when a restore needs it.
// - Result<T>::value() throws std::system_error carrying Error::message() on failure.
// - A moved-from Client may only be destroyed or assigned to.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hf3fs_meta/error.hpp"
#include "hf3fs_meta/policies.hpp"
#include "hf3fs_meta/transport.hpp"
#include "hf3fs_meta/types.hpp"

namespace hf3fs_meta {

struct ClientOptions {
  std::string base_url = "http://127.0.0.1:18000";
  std::chrono::milliseconds connect_timeout{1000};
  std::chrono::milliseconds request_timeout{5000};  // per attempt
  // Not empty: every request carries `Authorization: Bearer <auth_token>` (a server started with
  // --auth-token-file). Empty: no Authorization header, as vLLM's own client.
  std::string auth_token;
  // For an https:// base_url: the PEM file of the CA that signed the server's certificate (empty:
  // the system's CAs). Used by the default CurlTransport.
  std::string ca_file;
  // An answer whose body is larger is a protocol_error (CurlTransport stops reading it there), so a
  // broken or hostile server cannot take the worker's memory.
  std::size_t max_answer_bytes = kDefaultMaxAnswerBytes;
  // Null: a CurlTransport for base_url (keep-alive, one pooled connection per concurrent caller).
  // make_in_process_transport() serves tests and single-process users.
  std::shared_ptr<Transport> transport;
  // Resilience: see policies.hpp. Null members take the documented defaults.
  std::shared_ptr<const RetryPolicy> retry_policy;
  std::shared_ptr<const BackoffPolicy> backoff_policy;
  std::shared_ptr<const IdempotencyPolicy> idempotency_policy;
  RetryBudgetOptions retry_budget;
  std::shared_ptr<Clock> clock;
  std::shared_ptr<Sleeper> sleeper;
  std::shared_ptr<ClientObserver> observer;
};

// Per-call overrides.
struct CallOptions {
  std::optional<std::chrono::milliseconds> deadline;  // replaces the retry policy's deadline
};

// A raw call's answer (2xx); any other status comes back as an Error, classified.
struct RawResponse {
  int status = 0;
  std::string content_type;
  std::string body;
};

class Client {
 public:
  explicit Client(ClientOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  Client(Client&&) noexcept;
  Client& operator=(Client&&) noexcept;

  // POST /rank/{rank}/initialize -> the server's message.
  Result<std::string> initialize(Rank rank, std::int64_t num_pages, Role role = Role::worker,
                                 const CallOptions& call = {});
  // Sends the initialize and registers the rank, so that the client restores it when the server
  // says "not initialized". A scheduler's initialize registers nothing (there is nothing to
  // restore) and leaves a worker's registration of the same rank as it is.
  Result<std::string> ensure_initialized(Rank rank, std::int64_t num_pages, Role role = Role::worker,
                                         const CallOptions& call = {});
  // Registers without sending: the first initialize goes out when the server says "not initialized".
  void register_rank(Rank rank, std::int64_t num_pages, Role role = Role::worker);

  // POST /keys/batch_allocate -> one allocation per key, in request order; page kNoPage for none.
  Result<std::vector<Allocation>> allocate(Rank rank, const std::vector<BlockKey>& keys,
                                           const CallOptions& call = {});
  // The same, every key with an empty prefix key (as vLLM workers send them).
  Result<std::vector<Allocation>> allocate(Rank rank, const std::vector<std::string>& keys,
                                           const CallOptions& call = {});
  // POST /keys/confirm_write.
  Result<void> confirm_write(Rank rank, const std::vector<Confirmation>& confirmations,
                             const std::vector<Page>& pages_to_release = {}, const CallOptions& call = {});
  // POST /keys/batch_exists -> true for each complete key.
  Result<std::vector<bool>> batch_exists(const std::vector<std::string>& keys, const CallOptions& call = {});
  // POST /keys/get_locations -> the rank's page of each complete key, else nullopt.
  Result<std::vector<std::optional<Page>>> get_locations(Rank rank, const std::vector<std::string>& keys,
                                                         const CallOptions& call = {});
  // POST /clear: the server forgets every rank and key.
  Result<void> clear(const CallOptions& call = {});
  // POST a body as it is and classify the answer (for tools and tests).
  Result<RawResponse> raw(std::string_view path, std::string_view body, const CallOptions& call = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hf3fs_meta
