// A namespace name: the one check of its bytes with a message saying what is wrong, made
// wherever a name comes from (ClientOptions, Python's namespace=, $HF3FS_META_NAMESPACE, the CLI's
// --namespace, the server's --tenants-file). The rule itself is routes.hpp's valid_namespace_name.
#pragma once

#include <cstddef>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

#include "hf3fs_meta/routes.hpp"

namespace hf3fs_meta::internal {

inline constexpr std::string_view kNamespaceRule = "1 to 64 characters of A-Z, a-z, 0-9, '.', '_' and '-'";
static_assert(kMaxNamespaceBytes == 64, "kNamespaceRule says 64");

// The server's 400 details for a bad header (the router and the in-process transport answer alike;
// the value is never echoed).
inline std::string namespace_header_invalid() {
  return std::string(kNamespaceHeader) + " must be " + std::string(kNamespaceRule);
}
inline std::string namespace_header_repeated() { return std::string(kNamespaceHeader) + " was given more than once"; }

// Why `name` is not a namespace name, or nullopt when it is. The first bad byte is named by its
// offset, never echoed (it may be a CR, a LF or a byte beyond ASCII).
inline std::optional<std::string> namespace_problem(std::string_view name) {
  if (name.empty()) return "is empty: a namespace name is " + std::string(kNamespaceRule);
  if (name.size() > kMaxNamespaceBytes) {
    return "is " + std::to_string(name.size()) + " bytes: a namespace name is " + std::string(kNamespaceRule);
  }
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (namespace_char(name[i])) continue;
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned>(static_cast<unsigned char>(name[i])));
    return "has byte " + std::string(hex) + " at offset " + std::to_string(i) + ": a namespace name is " +
           std::string(kNamespaceRule);
  }
  return std::nullopt;
}

}  // namespace hf3fs_meta::internal
