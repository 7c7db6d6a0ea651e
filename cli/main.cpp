// hf3fs-meta: poke a live HF3FS metadata server. See `hf3fs-meta --help`.
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "cli.hpp"

int main(int argc, char** argv) {
  hf3fs_meta::cli::Environment env;
  if (const char* url = std::getenv("HF3FS_META_URL"); url != nullptr && *url != '\0') env.default_url = url;
  if (const char* token = std::getenv("HF3FS_META_TOKEN"); token != nullptr) env.default_token = token;
  if (const char* ns = std::getenv("HF3FS_META_NAMESPACE"); ns != nullptr) env.default_namespace = ns;
  std::vector<std::string> args(argv + 1, argv + argc);
  return hf3fs_meta::cli::run(args, env, std::cout, std::cerr);
}
