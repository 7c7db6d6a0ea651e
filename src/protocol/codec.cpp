// The wire codec: request and response bodies <-> typed values.
//
// Encoders write compact JSON (no spaces) straight into a std::string (internal::JsonWriter). The
// server's answers must be byte for byte what FastAPI's JSONResponse renders (json.dumps with
// separators (",", ":") and ensure_ascii=False). Our client's requests use the same compact form;
// vLLM's own client sends `{"rank": 3, "keys": [["k", ""]]}` with spaces and \u-escaped non-ASCII,
// and the server reads both alike.
//
// Decoders parse with RapidJSON, one decoder per message: the batch messages with its SAX reader in
// place (internal/object_reader.hpp), each decoder a sink; initialize and the error details, small
// and nested, with its DOM. The batch messages first try the fast path (internal/compact_json.hpp),
// which recognises their compact forms or gives up. The client's decoders check an answer against what was sent; the
// server's strict decoders refuse what vLLM would take with a 500 or corrupt its state with, and
// keep vLLM's exact 400 texts where vLLM has one (docs/protocol.md, "Deviations").

// This file: what both halves use, compiled into hf3fs_meta::protocol. The client's half is
// codec_client.cpp (hf3fs_meta::protocol, under hf3fs_meta::client); the server's half is
// codec_server.cpp (hf3fs_meta::service). Their shared pieces: codec_support.hpp.
#include "hf3fs_meta/protocol.hpp"
#include "hf3fs_meta/routes.hpp"

#include <charconv>
#include <string>

#include "internal/compact_json.hpp"
#include "internal/json.hpp"

namespace hf3fs_meta::internal {
bool& fast_path_enabled() {
  thread_local bool enabled = true;
  return enabled;
}
}  // namespace hf3fs_meta::internal

namespace hf3fs_meta::protocol {

std::optional<Rank> parse_path_rank(std::string_view segment) noexcept {
  // from_chars takes a leading '-' but no '+', spaces or underscores: the plain form we accept.
  if (segment.empty() || segment == "-") return std::nullopt;
  Rank rank = 0;
  const auto [end, ec] = std::from_chars(segment.data(), segment.data() + segment.size(), rank);
  if (ec != std::errc() || end != segment.data() + segment.size()) return std::nullopt;
  return rank;
}

}  // namespace hf3fs_meta::protocol

namespace hf3fs_meta {

std::string request_path(Route route, Rank rank) {
  const std::string_view pattern = path_of(route);
  const auto at = pattern.find(kRankParameter);
  if (at == std::string_view::npos) return std::string(pattern);
  std::string path(pattern.substr(0, at));
  internal::append_int(path, rank);
  path += pattern.substr(at + kRankParameter.size());
  return path;
}

std::string request_path(Route route, std::string_view name) {
  const std::string_view pattern = path_of(route);
  const auto at = pattern.find(kNameParameter);
  if (at == std::string_view::npos) return std::string(pattern);
  std::string path(pattern.substr(0, at));
  path += name;
  path += pattern.substr(at + kNameParameter.size());
  return path;
}

}  // namespace hf3fs_meta
