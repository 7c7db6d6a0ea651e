// How refusals name what they refuse, in the same words wherever the refusal is made (the state
// model, the server's codec, the client's checks): "keys[3]", "'abc'".
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace hf3fs_meta::internal {

inline std::string indexed(std::string_view field, std::size_t index) {
  std::string out(field);
  out += '[';
  out += std::to_string(index);
  out += ']';
  return out;
}

inline std::string quoted(std::string_view key) {
  std::string out;
  out.reserve(key.size() + 2);
  out += '\'';
  out += key;
  out += '\'';
  return out;
}

}  // namespace hf3fs_meta::internal
