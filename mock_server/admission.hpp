// Router::admit's authentication and namespace steps (docs/protocol.md, "Namespaces" and
// "Tenants"), in a file of their own: added to router.cpp they changed GCC's inlining there
// (string_view::compare, substr), and every request, with or without them, paid ~25 instructions in
// Router::step.
#pragma once

#include <optional>
#include <string_view>

#include <boost/beast/core/string.hpp>
#include <openssl/crypto.h>

#include "router.hpp"
#include "tenants.hpp"

namespace hf3fs_meta::server {

// The token of `Authorization: Bearer <token>` (the scheme's name in any case, RFC 7235), or nullopt.
// (Inline, as bearer_matches: on every request's path with --auth-token-file.)
inline std::optional<std::string_view> bearer_token(std::string_view header) {
  constexpr std::string_view kScheme = "Bearer ";
  if (header.size() < kScheme.size() || !boost::beast::iequals(header.substr(0, kScheme.size()), kScheme)) {
    return std::nullopt;
  }
  std::string_view given = header.substr(kScheme.size());
  while (!given.empty() && given.front() == ' ') given.remove_prefix(1);
  return given;
}

// `Authorization: Bearer <token>` carrying `token` (--auth-token-file). The comparison takes the same
// time wherever the first difference is; only a length mismatch is quicker.
inline bool bearer_matches(std::string_view header, std::string_view token) {
  const auto given = bearer_token(header);
  return given && given->size() == token.size() && CRYPTO_memcmp(given->data(), token.data(), token.size()) == 0;
}

// 401 with today's two texts, or 400 when Authorization came more than once; counted as `unauthorized`
// (--auth-token-file's and --tenants-file's).
void refuse_unauthenticated(const Request& request, Exchange& exchange);

// --tenants-file: who the request's token is, or null with the reply set: 401 (no or an unknown
// token), or 403 for a tenant on the server's own routes but /healthz.
const Principal* admit_tenant(const Tenants& tenants, ServerRoutesOn on, const Request& request, std::string_view path,
                              Exchange& exchange);

// The namespace the request acts in (exchange.ns): X-Hf3fs-Namespace's, checked, and with
// --tenants-file (`principal` set) the one its token allows. False with the reply set: 400 for a
// repeated or bad header (never echoed), 403 for a tenant naming another namespace (the same text
// whether it exists or not) or on an operator's route (/namespaces, /namespaces/{name}/drop). Runs
// after routing (exchange.target).
bool choose_namespace(const Request& request, const Principal* principal, Exchange& exchange);

}  // namespace hf3fs_meta::server
