#include "hash/keyed_hash.hpp"

#include <random>

namespace hf3fs_meta::hash {

const SipKey& process_key() noexcept {
  // std::random_device reads getrandom(2) here; a throw (no entropy source at all) ends the process,
  // which is better than serving with a key an attacker could know.
  static const SipKey key = [] {
    std::random_device random;
    auto word = [&random] { return (std::uint64_t{random()} << 32) | random(); };
    SipKey k;
    k.k0 = word();
    k.k1 = word();
    return k;
  }();
  return key;
}

}  // namespace hf3fs_meta::hash
