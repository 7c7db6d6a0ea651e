// What the client refuses before sending: validation.hpp.
#include "client/validation.hpp"

#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "hf3fs_meta/protocol.hpp"

#include "internal/field_text.hpp"
#include "internal/namespace_name.hpp"
#include "internal/utf8.hpp"

namespace hf3fs_meta::internal {

namespace {

Error invalid_argument(Operation op, std::string detail) {
  Error e;
  e.code = errc::invalid_argument;
  e.operation = op;
  e.detail = std::move(detail);
  e.sent = false;
  return e;
}

// The first item that repeats an earlier one: (its index, the earlier index). Batches are small
// (vLLM sends up to 128 keys), so short ones are compared pairwise without allocating.
template <class Get>
std::optional<std::pair<std::size_t, std::size_t>> first_duplicate(std::size_t n, Get get) {
  using Item = std::decay_t<decltype(get(std::size_t{0}))>;
  if (n <= 16) {
    for (std::size_t i = 1; i < n; ++i) {
      for (std::size_t j = 0; j < i; ++j) {
        if (get(j) == get(i)) return std::pair{i, j};
      }
    }
    return std::nullopt;
  }
  std::unordered_map<Item, std::size_t> seen;
  seen.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    auto [it, inserted] = seen.emplace(get(i), i);
    if (!inserted) return std::pair{i, it->second};
  }
  return std::nullopt;
}

// The offset of the first byte of `s` that does not start valid UTF-8, if any: JSON carries only
// UTF-8, and a server refuses a body with anything else (so it is refused here, before sending).
std::optional<std::size_t> invalid_utf8_at(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (std::size_t i = 0; i < s.size();) {
    // ASCII (every key vLLM makes: hex digests) is skipped eight bytes at a time.
    if (i + 8 <= s.size()) {
      std::uint64_t word;
      std::memcpy(&word, p + i, 8);
      if ((word & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    const std::size_t length = p[i] < 0x80 ? 1 : utf8_sequence_length(p + i, s.size() - i);
    if (length == 0) return i;
    i += length;
  }
  return std::nullopt;
}

// `s` is field[index] (or field[index][1], a prefix key); the name is built only for the error.
std::optional<Error> check_utf8(Operation op, std::string_view field, std::size_t index, std::string_view s,
                                bool prefix_key = false) {
  if (auto at = invalid_utf8_at(s)) {
    const std::string where = prefix_key ? indexed(indexed(field, index), 1) : indexed(field, index);
    return invalid_argument(op, where + ": not valid UTF-8 at byte " + std::to_string(*at));
  }
  return std::nullopt;
}

std::optional<Error> check_keys(Operation op, std::string_view field, std::size_t n,
                                const auto& key_at, bool allow_duplicates) {
  for (std::size_t i = 0; i < n; ++i) {
    if (key_at(i).empty()) return invalid_argument(op, indexed(field, i) + ": empty key");
    if (auto e = check_utf8(op, field, i, key_at(i))) return e;
  }
  if (!allow_duplicates) {
    if (auto dup = first_duplicate(n, key_at)) {
      return invalid_argument(op, indexed(field, dup->first) + ": duplicate key " + internal::quoted(key_at(dup->first)) +
                                      " (also " + indexed(field, dup->second) + ")");
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<Error> check_initialize(Rank rank, std::int64_t num_pages, Role role) {
  // Any int64 prints as a decimal the server parses, but the check keeps the client honest if
  // the server's notion of a path rank ever narrows.
  if (!protocol::parse_path_rank(std::to_string(rank))) {
    return invalid_argument(Operation::initialize, "rank: " + std::to_string(rank) + " does not fit a path segment");
  }
  if (role == Role::worker && num_pages <= 0) {
    return invalid_argument(Operation::initialize,
                            "num_pages: must be positive for a worker, got " + std::to_string(num_pages));
  }
  return std::nullopt;
}

std::optional<Error> check_confirm_write(const std::vector<Confirmation>& confirmations,
                                         const std::vector<Page>& releases) {
  constexpr auto op = Operation::confirm_write;
  const auto key_at = [&](std::size_t i) { return std::string_view(confirmations[i].key); };
  for (std::size_t i = 0; i < confirmations.size(); ++i) {
    if (confirmations[i].page < 0) {
      return invalid_argument(op, indexed("confirmations", i) + ": negative page " +
                                      std::to_string(confirmations[i].page));
    }
  }
  if (auto e = check_keys(op, "confirmations", confirmations.size(), key_at, false)) return e;
  if (auto dup = first_duplicate(confirmations.size(), [&](std::size_t i) { return confirmations[i].page; })) {
    const auto& [i, j] = *dup;
    return invalid_argument(op, indexed("confirmations", i) + ": page " + std::to_string(confirmations[i].page) +
                                    " of key " + internal::quoted(confirmations[i].key) + " is also named by key " +
                                    internal::quoted(confirmations[j].key) + " (" + indexed("confirmations", j) + ")");
  }
  for (std::size_t i = 0; i < releases.size(); ++i) {
    if (releases[i] < 0) {
      return invalid_argument(op, indexed("pages_to_release", i) + ": negative page " + std::to_string(releases[i]));
    }
  }
  if (auto dup = first_duplicate(releases.size(), [&](std::size_t i) { return releases[i]; })) {
    return invalid_argument(op, indexed("pages_to_release", dup->first) + ": duplicate page " +
                                    std::to_string(releases[dup->first]) + " (also " +
                                    indexed("pages_to_release", dup->second) + ")");
  }
  if (!confirmations.empty() && !releases.empty()) {
    const auto conflict = [&](std::size_t r, std::size_t c) {
      return invalid_argument(op, indexed("pages_to_release", r) + ": page " + std::to_string(releases[r]) +
                                      " is also confirmed for key " + internal::quoted(confirmations[c].key) + " (" +
                                      indexed("confirmations", c) + ")");
    };
    if (confirmations.size() * releases.size() <= 256) {
      for (std::size_t r = 0; r < releases.size(); ++r) {
        for (std::size_t c = 0; c < confirmations.size(); ++c) {
          if (confirmations[c].page == releases[r]) return conflict(r, c);
        }
      }
    } else {
      std::unordered_map<Page, std::size_t> confirmed;
      confirmed.reserve(confirmations.size());
      for (std::size_t c = 0; c < confirmations.size(); ++c) confirmed.emplace(confirmations[c].page, c);
      for (std::size_t r = 0; r < releases.size(); ++r) {
        if (auto it = confirmed.find(releases[r]); it != confirmed.end()) return conflict(r, it->second);
      }
    }
  }
  return std::nullopt;
}

std::optional<Error> check_allocate(const std::vector<BlockKey>& keys) {
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (auto e = check_utf8(Operation::allocate, "keys", i, keys[i].prefix_key, true)) return e;
  }
  return check_keys(Operation::allocate, "keys", keys.size(), [&](std::size_t i) { return std::string_view(keys[i].key); },
                    false);
}

std::optional<Error> check_lookup(Operation operation, const std::vector<std::string>& keys) {
  return check_keys(operation, "keys", keys.size(), [&](std::size_t i) { return std::string_view(keys[i]); }, true);
}

std::optional<Error> check_namespace_name(Operation operation, std::string_view name) {
  if (auto problem = namespace_problem(name)) return invalid_argument(operation, "name " + *problem);
  return std::nullopt;
}

}  // namespace hf3fs_meta::internal
