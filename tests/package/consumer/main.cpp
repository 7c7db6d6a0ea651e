// A user's program built against the installed package, linking hf3fs_meta::client only: it talks to
// the installed reference server at $HF3FS_META_URL (check_package.sh starts one).
#include <cstdlib>
#include <iostream>
#include <string>

#include <hf3fs_meta/client.hpp>

int main() {
  const char* url = std::getenv("HF3FS_META_URL");
  if (url == nullptr) {
    std::cerr << "consumer: HF3FS_META_URL is not set\n";
    return 2;
  }
  hf3fs_meta::Client client({.base_url = url});
  if (auto initialized = client.ensure_initialized(0, 4); !initialized) {
    std::cerr << "consumer: " << initialized.error().message() << '\n';
    return 1;
  }
  // Braced keys: a key alone, and a key with its prefix key.
  auto allocated = client.allocate(0, {"block", {"next", "block"}});
  if (!allocated || allocated.value() != std::vector<hf3fs_meta::Page>{0, 1}) return 1;
  if (!client.confirm_write(0, {{"block", 0}, {"next", 1}})) return 1;
  auto exists = client.batch_exists({"block", "next", "absent"});
  if (!exists || exists.value() != std::vector<bool>{true, true, false}) return 1;
  auto stats = client.stats();  // StateStats, from <hf3fs_meta/stats.hpp>
  if (!stats || stats.value().ranks.size() != 1 || stats.value().ranks[0].second.mapped != 2) return 1;
  std::cout << "consumer: allocated pages " << allocated.value()[0] << ", " << allocated.value()[1] << '\n';
  return 0;
}
