#include "example_support.hpp"

#include <openssl/evp.h>

#include <array>
#include <cstdlib>
#include <iostream>

namespace example {

std::string server_url(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string_view(argv[i]) == "--url") return argv[i + 1];
  }
  if (const char* env = std::getenv("HF3FS_META_URL"); env != nullptr && *env != '\0') return env;
  return "http://127.0.0.1:18000";
}

std::string block_key(std::string_view contents) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int size = 0;
  if (EVP_Digest(contents.data(), contents.size(), digest.data(), &size, EVP_md5(), nullptr) != 1) {
    std::cerr << "md5 failed\n";
    std::exit(1);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < size; ++i) {
    hex += kHex[digest[i] >> 4];
    hex += kHex[digest[i] & 0xf];
  }
  return hex;
}

void expect(bool condition, std::string_view what) {
  if (!condition) {
    std::cerr << "unexpected: " << what << '\n';
    std::exit(1);
  }
}

void fail(std::string_view what, const hf3fs_meta::Error& error) {
  std::cerr << what << " failed: " << hf3fs_meta::to_string(error.code) << ": " << error.message() << '\n';
  std::exit(1);
}

void must(hf3fs_meta::Result<void> result, std::string_view what) {
  if (!result) fail(what, result.error());
}

}  // namespace example
