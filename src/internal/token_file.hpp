// A bearer token: the one check of its bytes, made wherever a token comes from (ClientOptions,
// Python's token=, $HF3FS_META_TOKEN, the CLI's --token-file, the server's --auth-token-file), and
// the reading of a token file, as the server (--auth-token-file) and the CLI (--token-file) both
// read it: the file's content without surrounding whitespace (an editor's trailing newline).
#pragma once

#include <cstddef>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>

namespace hf3fs_meta::internal {

// Why `token` cannot be sent as `Authorization: Bearer <token>`, or nullopt when it can. Every byte
// must be visible ASCII (0x21-0x7E): a CR or LF would end the header and add others of the
// sender's choosing, a space or a control byte is not a token character, and a byte beyond ASCII
// reaches no two servers alike. The first bad byte is named, by its offset.
inline std::optional<std::string> token_problem(std::string_view token) {
  for (std::size_t i = 0; i < token.size(); ++i) {
    const auto byte = static_cast<unsigned char>(token[i]);
    if (byte >= 0x21 && byte <= 0x7E) continue;
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned>(byte));
    return "byte " + std::string(hex) + " at offset " + std::to_string(i) +
           " is not visible ASCII (0x21-0x7E): whitespace, control characters (CR, LF) and non-ASCII "
           "bytes cannot be sent in a bearer token";
  }
  return std::nullopt;
}

// The token, or nullopt with `error` saying why (no such file, empty, or a byte token_problem
// refuses).
inline std::optional<std::string> read_token_file(const std::string& path, std::string& error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = "cannot read the token file '" + path + "'";
    return std::nullopt;
  }
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  constexpr const char* kSpace = " \t\r\n";
  const auto first = text.find_first_not_of(kSpace);
  if (first == std::string::npos) {
    error = "the token file '" + path + "' is empty";
    return std::nullopt;
  }
  text = text.substr(first, text.find_last_not_of(kSpace) - first + 1);
  if (auto problem = token_problem(text)) {
    error = "the token in '" + path + "': " + *problem;
    return std::nullopt;
  }
  return text;
}

}  // namespace hf3fs_meta::internal
