// A bearer token read from a file, as the server (--auth-token-file) and the CLI (--token-file) both
// read it: the file's content without surrounding whitespace (an editor's trailing newline).
#pragma once

#include <fstream>
#include <iterator>
#include <optional>
#include <string>

namespace hf3fs_meta::internal {

// The token, or nullopt with `error` saying why (no such file, empty, or a byte an HTTP header
// cannot carry inside a token: whitespace, control characters).
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
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte <= 0x20 || byte == 0x7F) {
      error = "the token in '" + path + "' contains whitespace or a control character";
      return std::nullopt;
    }
  }
  return text;
}

}  // namespace hf3fs_meta::internal
