// The tables' keyed hash: SipHash as its reference computes it, under a key of this process's, and
// the page tag that snapshots hold, which no key may change.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "hash/keyed_hash.hpp"
#include "state/key_table.hpp"

namespace hf3fs_meta::hash {
namespace {

// The reference vectors of SipHash-2-4 (Aumasson and Bernstein's vectors.h): key bytes 0..15,
// message bytes 0..n-1. 8 and 15 cross the word boundary and fill the last partial word.
TEST(SipHashTest, MatchesTheReferenceVectors) {
  const SipKey key{0x0706050403020100ULL, 0x0f0e0d0c0b0a0908ULL};
  const std::pair<std::size_t, std::uint64_t> vectors[] = {
      {0, 0x726fdb47dd0e0e31ULL},  {1, 0x74f839c593dc67fdULL},  {2, 0x0d6c8009d9a94f5aULL},
      {3, 0x85676696d7fb7e2dULL},  {4, 0xcf2794e0277187b7ULL},  {5, 0x18765564cd99a68dULL},
      {6, 0xcbc9466e58fee3ceULL},  {7, 0xab0200f58b01d137ULL},  {8, 0x93f5f5799a932462ULL},
      {9, 0x9e0082df0ba9e4b0ULL},  {10, 0x7a5dbbc594ddb9f3ULL}, {11, 0xf4b32f46226bada7ULL},
      {12, 0x751e8fbc860ee5fbULL}, {15, 0xa129ca6149be45e5ULL},
  };
  std::string message;
  for (int i = 0; i < 16; ++i) message.push_back(static_cast<char>(i));
  for (const auto& [length, expected] : vectors) {
    EXPECT_EQ((siphash<2, 4>(key, std::string_view(message).substr(0, length))), expected) << "length " << length;
  }
}

TEST(SipHashTest, TheKeyChangesEveryHash) {
  const SipKey a{1, 2};
  const SipKey b{1, 3};
  for (std::string_view s : {"", "k", "0123456789abcdef0123456789abcdef"}) {
    EXPECT_NE((siphash<1, 3>(a, s)), (siphash<1, 3>(b, s))) << s;
  }
}

// The tables hash under this process's key, drawn at random (not the all-zero key of a missing
// seed), the same at every call.
TEST(KeyedHashTest, TheKeyTableHashesUnderThisProcessesRandomKey) {
  const SipKey& key = process_key();
  EXPECT_FALSE(key.k0 == 0 && key.k1 == 0);
  EXPECT_EQ(&process_key(), &key);
  const std::string_view name = "0123456789abcdef0123456789abcdef";
  EXPECT_EQ(KeyedHash{}(name), (siphash<1, 3>(key, name)));
  EXPECT_EQ(state_model::HashedKey(name).hash, KeyedHash{}(name));
  EXPECT_NE(state_model::HashedKey(name).hash, std::hash<std::string_view>{}(name));
}

// What a page records of its key is in snapshots and compared between members: it must not depend
// on the process (nor change between versions: these values are what earlier versions wrote).
TEST(KeyedHashTest, ThePageTagIsTheUnkeyedOneSnapshotsHold) {
  EXPECT_EQ(state_model::page_tag(""), 0x4b78b9feu);
  EXPECT_EQ(state_model::page_tag("k"), 0x05d4edb1u);
  EXPECT_EQ(state_model::page_tag("0123456789abcdef0123456789abcdef"), 0x2eecbc27u);
}

}  // namespace
}  // namespace hf3fs_meta::hash
