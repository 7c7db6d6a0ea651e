// Connection: what a Client does, as an interface, so that a user's code that takes a Client can be
// unit-tested with hf3fs_meta_mocks::MockConnection (<hf3fs_meta/mocks/mock_connection.hpp>) instead
// of a server. make_connection() gives the real one: validation, retries, re-initialization.
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
#include "hf3fs_meta/stats.hpp"
#include "hf3fs_meta/transport.hpp"
#include "hf3fs_meta/types.hpp"

namespace hf3fs_meta {

struct ClientOptions {
  // The server, when `endpoints` is empty: one base URL, http:// or https://.
  std::string base_url = "http://127.0.0.1:18000";
  // Not empty: the members of a highly available service (docs/design.md, "Endpoints"),
  // and base_url is not used. Calls go to one endpoint at a time, shared by every thread; a member
  // that answers 503 "not the leader" sends them to the leader it names (X-Hf3fs-Leader, which need
  // not be in this list), or, naming none, to the next endpoint, as does a failure with no answer.
  // Such a 503 applied nothing, so any call is repeated after it, within its deadline. Each entry a
  // base URL as base_url (split_endpoints() reads "A,B,C"); any that is not refuses every call
  // before sending (errc::invalid_argument naming this option and the entry's index). The token,
  // namespace, ca_file and transport hold for every endpoint.
  std::vector<std::string> endpoints;
  std::chrono::milliseconds connect_timeout{1000};
  std::chrono::milliseconds request_timeout{5000};  // per attempt
  // Not empty: every request carries `Authorization: Bearer <auth_token>` (a server started with
  // --auth-token-file). Empty: no Authorization header, as vLLM's own client.
  std::string auth_token;
  // Not empty: the namespace this client acts in (docs/protocol.md, "Namespaces"), sent as
  // X-Hf3fs-Namespace on every request (restores included), so its ranks, pages and keys are apart
  // from other namespaces'. 1 to 64 characters of A-Z, a-z, 0-9, '.', '_' and '-'; any other value
  // refuses every call before sending (errc::invalid_argument naming this option). A server that
  // answers without echoing the header has no namespaces (vLLM's): its answers would come from the
  // shared space, so they are errc::protocol_error. Empty: no header, the default namespace, every
  // byte on the wire as without namespaces. `namespace` is a keyword, hence the name.
  std::string namespace_name;
  // For an https:// endpoint: the PEM file of the CA that signed the server's certificate (empty:
  // the system's CAs). Used by the default CurlTransport.
  std::string ca_file;
  // An answer whose body is larger is a protocol_error (CurlTransport stops reading it there), so a
  // broken or hostile server cannot take the worker's memory.
  std::size_t max_answer_bytes = kDefaultMaxAnswerBytes;
  // Null: a CurlTransport (keep-alive, one pooled connection per concurrent caller).
  // make_in_process_transport() (<hf3fs_meta/in_process_transport.hpp>, in hf3fs_meta::service)
  // serves tests and single-process users.
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

// Every Client call, with no defaults (Client supplies them). Implementations must be safe to call
// from several threads at once.
class Connection {
 public:
  virtual ~Connection() = default;
  virtual Result<std::string> initialize(Rank rank, std::int64_t num_pages, Role role, const CallOptions& call) = 0;
  virtual Result<std::string> ensure_initialized(Rank rank, std::int64_t num_pages, Role role,
                                                 const CallOptions& call) = 0;
  virtual void register_rank(Rank rank, std::int64_t num_pages, Role role) = 0;
  virtual Result<std::vector<Page>> allocate(Rank rank, const std::vector<BlockKey>& keys, const CallOptions& call) = 0;
  virtual Result<void> confirm_write(Rank rank, const std::vector<Confirmation>& confirmations,
                                     const std::vector<Page>& pages_to_release, const CallOptions& call) = 0;
  virtual Result<std::vector<bool>> batch_exists(const std::vector<std::string>& keys, const CallOptions& call) = 0;
  virtual Result<std::vector<std::optional<Page>>> get_locations(Rank rank, const std::vector<std::string>& keys,
                                                                 const CallOptions& call) = 0;
  // Extensions of the reference server (POST /keys/delete, GET /stats).
  virtual Result<std::vector<bool>> delete_keys(const std::vector<std::string>& keys, const CallOptions& call) = 0;
  virtual Result<StateStats> stats(const CallOptions& call) = 0;
  virtual Result<void> clear(const CallOptions& call) = 0;
  virtual Result<DropOutcome> drop_rank(Rank rank, const CallOptions& call) = 0;
  virtual Result<RawResponse> raw(std::string_view path, std::string_view body, const CallOptions& call) = 0;
  // Namespaces (GET /namespaces, POST /namespaces/{name}/drop, POST /keys/status). Pure, as
  // every call above: a user's own Connection must implement them (MockConnection does), so that a
  // missing one is a compile error rather than a call failing at run time.
  virtual Result<std::vector<NamespaceSummary>> namespaces(const CallOptions& call) = 0;
  virtual Result<NamespaceDropOutcome> drop_namespace(std::string_view name, const CallOptions& call) = 0;
  virtual Result<KeyStatusAnswer> key_status(const std::vector<std::string>& keys, const CallOptions& call) = 0;
};

// "http://a:18000,http://b:18000" -> {"http://a:18000", "http://b:18000"} for ClientOptions::endpoints:
// split at each ',' (no URL has one), spaces around entries dropped, an empty entry kept (and so
// refused by its index). How the CLI's --url, $HF3FS_META_URL and Python's url= read a list.
std::vector<std::string> split_endpoints(std::string_view list);

// The SDK's connection to a server, as ClientOptions describe it.
std::shared_ptr<Connection> make_connection(ClientOptions options = {});

}  // namespace hf3fs_meta
