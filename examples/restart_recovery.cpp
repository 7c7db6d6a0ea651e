// The metadata server restarts and forgets every rank (here: the reference server's fault injection,
// which needs --enable-fault-injection). vLLM's own client fails forever after that ("Rank 0 not
// initialized"); a registered rank makes the SDK initialize it again and carry on.
#include <iostream>
#include <string>
#include <vector>

#include "example_support.hpp"
#include "hf3fs_meta/client.hpp"

using namespace hf3fs_meta;

namespace {

class PrintReinitializations final : public ClientObserver {
 public:
  void on_reinitialize(const ReinitializeEvent& event) override {
    std::cout << "re-initialized rank " << event.rank << " (request " << event.request_id << ")\n";
  }
  void on_success(const SuccessEvent& event) override { last_attempts = event.attempts; }
  int last_attempts = 0;
};

}  // namespace

int main(int argc, char** argv) {
  auto observer = std::make_shared<PrintReinitializations>();
  ClientOptions options;
  options.base_url = example::server_url(argc, argv);
  options.observer = observer;
  Client client(std::move(options));

  constexpr Rank kRank = 0;
  example::must(client.ensure_initialized(kRank, 64), "initialize");

  std::vector<std::string> keys;
  for (int block = 0; block < 4; ++block) keys.push_back(example::block_key("restart block " + std::to_string(block)));
  auto before = example::must(client.allocate(kRank, {keys.begin(), keys.end()}), "allocate");
  // Blocks 0 and 1 are written and confirmed; blocks 2 and 3 are still being written.
  example::must(client.confirm_write(kRank, {{keys[0], before[0]}, {keys[1], before[1]}}), "confirm_write");
  std::cout << "before the restart: 4 pages allocated, 2 confirmed\n";

  auto forgot = example::must(client.raw("/_faults", R"({"forget_state": true})"), "forget_state");
  example::expect(forgot.status == 200, "the server accepted forget_state");
  std::cout << "the server forgot every rank and key, as a restart does\n";

  // The server answers "Rank 0 not initialized"; the client initializes rank 0 again and repeats.
  const std::string fresh = example::block_key("a block after the restart");
  auto after = example::must(client.allocate(kRank, {fresh}), "allocate");
  std::cout << "allocated " << fresh << " -> page " << after[0] << " in " << observer->last_attempts
            << " attempts\n";
  example::expect(observer->last_attempts == 2, "two attempts: one refused, one after the re-initialization");

  // Block 3's write finishes now, but its page belongs to the state the server lost.
  auto stale = client.confirm_write(kRank, {{keys[3], before[3]}});
  example::expect(!stale, "the confirmation of a page from before the restart is refused");
  const Error& e = stale.error();
  example::expect(e.code == errc::stale_allocation || (e.code == errc::rank_not_initialized && e.reinitialized),
                  "stale_allocation, or rank_not_initialized after a re-initialization");
  std::cout << "page " << before[3] << " of block 3 was allocated before the restart: "
            << to_string(e.code) << "; allocating it again\n";

  auto again = example::must(client.allocate(kRank, {keys[3]}), "allocate");
  example::must(client.confirm_write(kRank, {{keys[3], again[0]}, {fresh, after[0]}}), "confirm_write");
  auto exists = example::must(client.batch_exists({keys[0], keys[3], fresh}), "batch_exists");
  example::expect(!exists[0], "block 0 was lost with the restart");
  example::expect(exists[1] && exists[2], "block 3 and the new block exist");
  std::cout << "block 3 now at page " << again[0] << "; block 0 was lost with the restart and is recomputed\n";
  return 0;
}
