// An endpoint: the base URL of one server (http://host:port, https://host:port, maybe with a path
// prefix), the one check of its text and the one split of a comma-separated list of them, made
// wherever endpoints come from (ClientOptions, Python's url=, the CLI's --url and $HF3FS_META_URL,
// a leader's X-Hf3fs-Leader) and fit for a server's advertised URL too.
#pragma once

#include <cstddef>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "internal/field_text.hpp"

namespace hf3fs_meta::internal {

// Longer is no base URL anyone writes: a bound on what a server's header can make a client keep.
inline constexpr std::size_t kMaxEndpointBytes = 2048;

// The scheme's part of `url` ("http://" or "https://", in any case), or 0 when it has neither.
inline std::size_t endpoint_scheme_length(std::string_view url) {
  const auto starts = [&](std::string_view scheme) {
    if (url.size() < scheme.size()) return false;
    for (std::size_t i = 0; i < scheme.size(); ++i) {
      char c = url[i];
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      if (c != scheme[i]) return false;
    }
    return true;
  };
  if (starts("http://")) return 7;
  if (starts("https://")) return 8;
  return 0;
}

// Why `url` cannot be an endpoint, or nullopt when it can: http:// or https://, a host, a port of
// 1 to 65535 if one is given, and only visible ASCII without ',' (the lists' separator), '?' or '#'
// (the client appends each route's path), nor user info ('@': a token belongs in a header).
inline std::optional<std::string> endpoint_problem(std::string_view url) {
  if (url.empty()) return std::string("empty: an endpoint is a URL such as http://127.0.0.1:18000");
  if (url.size() > kMaxEndpointBytes) {
    return "longer than " + std::to_string(kMaxEndpointBytes) + " bytes";
  }
  // Quoted only once every byte is known to be visible ASCII.
  for (std::size_t i = 0; i < url.size(); ++i) {
    const auto byte = static_cast<unsigned char>(url[i]);
    if (byte < 0x21 || byte > 0x7E) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned>(byte));
      return "byte " + std::string(hex) + " at offset " + std::to_string(i) +
             " is not visible ASCII: an endpoint is a URL such as http://127.0.0.1:18000";
    }
    if (url[i] == ',' || url[i] == '?' || url[i] == '#' || url[i] == '@') {
      return quoted(url) + " has '" + std::string(1, url[i]) + "' at offset " + std::to_string(i) +
             ": an endpoint is a base URL without a query, fragment or user info" +
             (url[i] == ',' ? " (several endpoints are a list, not one URL)" : "");
    }
  }
  const std::size_t scheme = endpoint_scheme_length(url);
  if (scheme == 0) return quoted(url) + " is not an http:// or https:// URL";
  std::string_view authority = url.substr(scheme);
  authority = authority.substr(0, authority.find('/'));
  std::string_view host = authority;
  std::string_view port;
  if (authority.starts_with('[')) {  // an IPv6 literal: [::1]:18000
    const auto close = authority.find(']');
    if (close == std::string_view::npos) return quoted(url) + " has an IPv6 host without its closing ']'";
    host = authority.substr(0, close + 1);
    const std::string_view rest = authority.substr(close + 1);
    if (!rest.empty() && !rest.starts_with(':')) return quoted(url) + " has something other than ':port' after ']'";
    if (!rest.empty()) port = rest.substr(1);
    if (host.size() == 2) return quoted(url) + " has no host";
  } else if (const auto colon = authority.rfind(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
    if (port.empty()) return quoted(url) + " has ':' without a port";
  }
  if (host.empty()) return quoted(url) + " has no host";
  if (authority.size() > host.size()) {
    unsigned long value = 0;
    bool digits = !port.empty() && port.size() <= 5;
    for (const char c : port) {
      digits = digits && c >= '0' && c <= '9';
      if (digits) value = value * 10 + static_cast<unsigned long>(c - '0');
    }
    if (!digits || value < 1 || value > 65535) {
      return quoted(url) + " has port '" + std::string(port) + "': a port is 1 to 65535";
    }
  }
  return std::nullopt;
}

// The endpoint as the client sends to it and compares it: without trailing '/'s (the route's path
// brings its own), so "http://h:1/" and "http://h:1" are one endpoint.
inline std::string normalized_endpoint(std::string_view url) {
  while (!url.empty() && url.back() == '/') url.remove_suffix(1);
  return std::string(url);
}

// "A,B,C" -> {"A", "B", "C"}, each without surrounding spaces or tabs. An empty entry (",," or a
// trailing ',') stays, empty, for endpoint_problem to refuse by its index.
inline std::vector<std::string> split_endpoint_list(std::string_view list) {
  std::vector<std::string> out;
  for (;;) {
    const auto comma = list.find(',');
    std::string_view entry = list.substr(0, comma);
    while (!entry.empty() && (entry.front() == ' ' || entry.front() == '\t')) entry.remove_prefix(1);
    while (!entry.empty() && (entry.back() == ' ' || entry.back() == '\t')) entry.remove_suffix(1);
    out.emplace_back(entry);
    if (comma == std::string_view::npos) return out;
    list.remove_prefix(comma + 1);
  }
}

// Why the list cannot be a client's endpoints, naming `field` and the bad entry's index when there
// are several ("--url[1]: ..."), or nullopt.
inline std::optional<std::string> endpoint_list_problem(const std::vector<std::string>& endpoints,
                                                        std::string_view field) {
  if (endpoints.empty()) return std::string(field) + ": no endpoint: give at least one URL";
  for (std::size_t i = 0; i < endpoints.size(); ++i) {
    if (auto problem = endpoint_problem(endpoints[i])) {
      return (endpoints.size() > 1 ? indexed(field, i) : std::string(field)) + ": " + *problem;
    }
  }
  return std::nullopt;
}

}  // namespace hf3fs_meta::internal
