// Where a cluster keeps its state in etcd: every key under /hf3fs-meta/<cluster>/.
//   leader          the leader's advertised URL, under its lease; its create revision is the fence
//   tip             the seq of the last record in the log (decimal)
//   log/<seq>       one batch of journal records (their framing and seqs, log_format.hpp), keyed by
//                   the seq of its last record, in 20 digits so that etcd's byte order is the log's:
//                   the entry that holds record S is the first whose key is entry(S) or after
//   members/<name>  a live member's applied seq, under its lease
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace hf3fs_meta::server::ha {

class Keys {
 public:
  explicit Keys(std::string_view cluster) : prefix_(std::string("/hf3fs-meta/").append(cluster).append("/")) {}

  const std::string& prefix() const noexcept { return prefix_; }
  std::string leader() const { return prefix_ + "leader"; }
  std::string tip() const { return prefix_ + "tip"; }
  std::string log_prefix() const { return prefix_ + "log/"; }
  std::string entry(std::uint64_t seq) const {
    char digits[21];
    std::snprintf(digits, sizeof digits, "%020llu", static_cast<unsigned long long>(seq));
    return log_prefix() + digits;
  }
  std::string members_prefix() const { return prefix_ + "members/"; }
  std::string member(std::string_view name) const { return members_prefix().append(name); }

  // The seq of a log entry's key (its last record's); 0 if `key` is not one.
  std::uint64_t seq_of(std::string_view key) const;

 private:
  std::string prefix_;
};

inline std::uint64_t Keys::seq_of(std::string_view key) const {
  const std::string log = log_prefix();
  if (!key.starts_with(log) || key.size() != log.size() + 20) return 0;
  std::uint64_t seq = 0;
  for (char c : key.substr(log.size())) {
    const auto digit = static_cast<std::uint64_t>(c - '0');
    if (c < '0' || c > '9' || seq > (UINT64_MAX - digit) / 10) return 0;
    seq = seq * 10 + digit;
  }
  return seq;
}

}  // namespace hf3fs_meta::server::ha
