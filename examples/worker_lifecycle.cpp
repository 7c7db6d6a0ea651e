// What a vLLM worker does with the metadata service, for a tensor-parallel world of two ranks:
// initialize, allocate a page per KV block, write the blocks, confirm them, look them up, and give
// back the page of a block whose write failed. Run it against a fresh server (scripts/demo starts
// one): with other ranks present, a block needs their confirmations too before it exists.
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "example_support.hpp"
#include "hf3fs_meta/client.hpp"

using namespace hf3fs_meta;

int main(int argc, char** argv) {
  ClientOptions options;
  options.base_url = example::server_url(argc, argv);
  Client client(std::move(options));

  const std::vector<Rank> ranks = {0, 1};
  constexpr std::int64_t kPages = 256;
  // ensure_initialized also registers the rank: if the server restarts and forgets it, the client
  // initializes it again and carries on.
  for (Rank rank : ranks) {
    std::cout << example::must(client.ensure_initialized(rank, kPages), "initialize") << '\n';
  }

  std::vector<std::string> keys;
  for (int block = 0; block < 8; ++block) keys.push_back(example::block_key("tokens of block " + std::to_string(block)));
  constexpr std::size_t kFailedBlock = 5;

  for (Rank rank : ranks) {
    // A page per key, in the order of the keys.
    auto allocated = example::must(client.allocate(rank, {keys.begin(), keys.end()}), "allocate");
    std::set<Page> pages;
    for (Page page : allocated) {
      example::expect(page != kNoPage, "a free page for every block");
      pages.insert(page);
    }
    example::expect(pages.size() == keys.size(), "a different page for every block");

    // Write each block to its page in 3FS (not shown); block 5's write fails, so its page goes back.
    std::vector<Confirmation> written;
    std::vector<Page> release;
    for (std::size_t i = 0; i < allocated.size(); ++i) {
      if (i == kFailedBlock) {
        release.push_back(allocated[i]);
      } else {
        written.push_back({keys[i], allocated[i]});
      }
    }
    example::must(client.confirm_write(rank, written, release), "confirm_write");
    std::cout << "rank " << rank << ": wrote " << written.size() << " blocks, released page " << release[0]
              << " of the failed write\n";

    // A block exists once every rank of the world has confirmed it.
    auto exists = example::must(client.batch_exists(keys), "batch_exists");
    for (std::size_t i = 0; i < keys.size(); ++i) {
      bool complete = rank == ranks.back() && i != kFailedBlock;
      example::expect(exists[i] == complete, "block existence after rank " + std::to_string(rank));
    }
    std::cout << "after rank " << rank << " confirmed: "
              << (rank == ranks.back() ? "7 of 8 blocks exist" : "no block exists yet (rank 1 has not confirmed)")
              << '\n';
  }

  for (Rank rank : ranks) {
    auto locations = example::must(client.get_locations(rank, keys), "get_locations");
    std::cout << "rank " << rank << " locations:";
    for (const auto& page : locations) std::cout << ' ' << (page ? std::to_string(*page) : "null");
    std::cout << '\n';
    example::expect(!locations[kFailedBlock], "no location for the failed block");
  }

  // The failed block is written again: a fresh page on each rank, then confirmed.
  for (Rank rank : ranks) {
    auto again = example::must(client.allocate(rank, {keys[kFailedBlock]}), "allocate");
    example::expect(again[0] != kNoPage, "a page for the retried block");
    example::must(client.confirm_write(rank, {{keys[kFailedBlock], again[0]}}), "confirm_write");
  }
  auto exists = example::must(client.batch_exists(keys), "batch_exists");
  for (bool e : exists) example::expect(e, "every block exists after the retry");
  std::cout << "all 8 blocks exist\n";
  return 0;
}
