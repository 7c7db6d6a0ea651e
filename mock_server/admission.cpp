#include "admission.hpp"

#include <cstring>
#include <string>
#include <utility>

#include "hf3fs_meta/protocol_server.hpp"
#include "internal/namespace_name.hpp"

namespace hf3fs_meta::server {
namespace {

// A refusal with the server's JSON detail.
void refuse(Reply& reply, int status, const std::string& detail) { reply.set_json(status, protocol::encode_detail(detail)); }

void refuse_operator_route(std::string_view row, Reply& reply) {
  refuse(reply, 403, std::string(row) + " needs an operator token");
}

// The server's own route at `path` that only an operator may use (docs/protocol.md, "Tenants"), or
// null. (A route the server does not have, /_faults without --enable-fault-injection, is no route:
// 404 for everyone.)
const ServerRouteInfo* operator_server_route(std::string_view path, ServerRoutesOn on) {
  const ServerRouteInfo* row = find_server_route(path, on);
  return row && row->operator_only ? row : nullptr;
}

}  // namespace

void refuse_unauthenticated(const Request& request, Exchange& exchange) {
  exchange.label = ServerRoute::unauthorized;
  // Two credentials are refused, not one of them picked: a proxy in front that adds its own header
  // beside the client's must not have either one win silently.
  if (request.auth_headers > 1) {
    refuse(exchange.reply, 400, "Authorization was given more than once");
    return;
  }
  refuse(exchange.reply, 401,
         request.authorization.empty() ? "Not authenticated" : "Invalid authentication credentials");
}

const Principal* admit_tenant(const Tenants& tenants, ServerRoutesOn on, const Request& request, std::string_view path,
                              Exchange& exchange) {
  const auto token = request.auth_headers > 1 ? std::nullopt : bearer_token(request.authorization);
  const Principal* principal = token ? tenants.resolve(*token, exchange.tenant) : nullptr;
  if (!principal) {
    refuse_unauthenticated(request, exchange);
    return nullptr;
  }
  if (const auto* row = operator_server_route(path, on); row && !principal->operator_access) {
    exchange.label = row->route;
    refuse_operator_route(row->name, exchange.reply);
    return nullptr;
  }
  return principal;
}

bool choose_namespace(const Request& request, const Principal* principal, Exchange& exchange) {
  std::string_view named;  // the header's; empty: none, or the default one
  if (request.ns_headers != 0) {
    if (request.ns_headers > 1) {
      refuse(exchange.reply, 400, internal::namespace_header_repeated());
      return false;
    }
    if (!valid_namespace_name(request.ns)) {
      refuse(exchange.reply, 400, internal::namespace_header_invalid());
      return false;
    }
    if (request.ns != kDefaultNamespace) named = request.ns;
  }
  if (principal == nullptr || principal->operator_access) {
    exchange.ns = named;
    return true;
  }
  if (const RouteInfo& row = route_info(exchange.target.route); row.operator_only) {
    refuse_operator_route(row.name, exchange.reply);
    return false;
  }
  if (request.ns_headers != 0 && named != principal->ns) {
    // A valid name (checked above): safe to echo.
    refuse(exchange.reply, 403, std::string(kNamespaceHeader) + " " + request.ns + ": not permitted for this token");
    return false;
  }
  exchange.ns = principal->ns;
  return true;
}

}  // namespace hf3fs_meta::server
