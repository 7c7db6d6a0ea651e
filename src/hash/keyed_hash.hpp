// The keyed hash of every table that a client's bytes index: keys, request ids, namespace names.
//
// A fixed, public hash (std::hash) lets a client choose keys that all land on one chain or probe run:
// 20,000 such keys took seconds to insert, and the table's lock held every other tenant's calls
// meanwhile. SipHash (Aumasson and Bernstein) under a key drawn at random when the process starts
// leaves a client no way to know which keys collide. SipHash-1-3 is the variant Rust's and Python's
// tables use: fewer rounds than the 2-4 of a MAC, whose margin a hash table does not need.
//
// Hand-written, not OpenSSL's EVP_MAC("SIPHASH"), which fetches, allocates and initializes a MAC
// context for each message: a table hashes one short key at a time. Here a 32-byte key (vLLM's)
// hashes in 10.1 ns, where std::hash takes 4.0 ns (docs/performance.md, "Tenants").
//
// Nothing written to disk or sent between processes may carry this hash: each process has its own
// key. (A page's record of the key it was allocated for is on disk, and uses page_tag() instead.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace hf3fs_meta::hash {

struct SipKey {
  std::uint64_t k0 = 0;
  std::uint64_t k1 = 0;
};

namespace detail {

inline std::uint64_t rotl(std::uint64_t x, int b) noexcept { return (x << b) | (x >> (64 - b)); }

struct SipState {
  std::uint64_t v0, v1, v2, v3;

  void round() noexcept {
    v0 += v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32);
    v2 += v3; v3 = rotl(v3, 16); v3 ^= v2;
    v0 += v3; v3 = rotl(v3, 21); v3 ^= v0;
    v2 += v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32);
  }
  template <int Rounds>
  void absorb(std::uint64_t m) noexcept {
    v3 ^= m;
    for (int i = 0; i < Rounds; ++i) round();
    v0 ^= m;
  }
};

// A little-endian 64-bit word (SipHash reads its input so on every machine).
inline std::uint64_t load_le64(const unsigned char* p) noexcept {
  std::uint64_t w;
  std::memcpy(&w, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  w = __builtin_bswap64(w);
#endif
  return w;
}

}  // namespace detail

// SipHash-C-D of `data` under `key`, as the reference implementation computes it.
template <int C, int D>
std::uint64_t siphash(const SipKey& key, std::string_view data) noexcept {
  detail::SipState s{key.k0 ^ 0x736f6d6570736575ULL, key.k1 ^ 0x646f72616e646f6dULL,
                     key.k0 ^ 0x6c7967656e657261ULL, key.k1 ^ 0x7465646279746573ULL};
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  const std::size_t n = data.size();
  const unsigned char* const end = p + (n & ~std::size_t{7});
  for (; p != end; p += 8) s.absorb<C>(detail::load_le64(p));
  std::uint64_t last = static_cast<std::uint64_t>(n) << 56;
  for (std::size_t i = 0; i < (n & 7); ++i) last |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  s.absorb<C>(last);
  s.v2 ^= 0xff;
  for (int i = 0; i < D; ++i) s.round();
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

// This process's key: drawn from the system's random source the first time it is asked for, then
// fixed until the process ends (a table's hashes must not change under it).
const SipKey& process_key() noexcept;

// The hash of the tables: SipHash-1-3 under process_key(). Transparent, for maps of std::string
// looked up by std::string_view.
struct KeyedHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return static_cast<std::size_t>(siphash<1, 3>(process_key(), s));
  }
};

}  // namespace hf3fs_meta::hash
