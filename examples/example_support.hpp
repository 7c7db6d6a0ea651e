// Small helpers the examples share: where the server is, block names, and checks that fail loudly.
#pragma once

#include <string>
#include <string_view>

#include "hf3fs_meta/client.hpp"

namespace example {

// The server URL: --url URL on the command line, else $HF3FS_META_URL, else the default.
std::string server_url(int argc, char** argv);

// A block's name as vLLM's connector makes it: the lowercase md5 hex of its contents.
std::string block_key(std::string_view contents);

// Stops the example with exit status 1 when an expectation does not hold: ctest runs the examples,
// so an example that prints the wrong thing must fail.
void expect(bool condition, std::string_view what);

// The value of a result, or a printed error and exit status 1.
template <class T>
T must(hf3fs_meta::Result<T> result, std::string_view what);
void must(hf3fs_meta::Result<void> result, std::string_view what);

[[noreturn]] void fail(std::string_view what, const hf3fs_meta::Error& error);

template <class T>
T must(hf3fs_meta::Result<T> result, std::string_view what) {
  if (!result) fail(what, result.error());
  return std::move(result).value();
}

}  // namespace example
