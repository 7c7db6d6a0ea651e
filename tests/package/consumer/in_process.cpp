// A user's program that hosts the protocol in its own process: hf3fs_meta::service (the state model,
// Service and the in-process transport) beside hf3fs_meta::client, no server needed.
#include <iostream>
#include <memory>

#include <hf3fs_meta/client.hpp>
#include <hf3fs_meta/in_process_transport.hpp>

int main() {
  hf3fs_meta::ClientOptions options;
  options.transport = hf3fs_meta::make_in_process_transport(std::make_shared<hf3fs_meta::MetadataState>());
  hf3fs_meta::Client client(std::move(options));
  if (!client.ensure_initialized(0, 4)) return 1;
  auto allocated = client.allocate(0, {"block"});
  if (!allocated || allocated.value().at(0) != 0) return 1;
  std::cout << "consumer_in_process: allocated page " << allocated.value()[0] << '\n';
  return 0;
}
