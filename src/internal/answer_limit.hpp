// The one wording of an answer body over ClientOptions::max_answer_bytes, for the client and for
// CurlTransport (which stops reading such an answer as soon as it passes the limit).
#pragma once

#include <cstddef>
#include <string>

namespace hf3fs_meta::internal {

inline std::string answer_too_large(std::size_t limit) {
  return "the answer's body is larger than " + std::to_string(limit) +
         " bytes (ClientOptions::max_answer_bytes); not read further";
}

}  // namespace hf3fs_meta::internal
