// What the client refuses before sending (errc::invalid_argument, nothing sent): each check names
// the field and index of the first thing wrong. Apart from the retry loop, so that both can be read
// and tested on their own.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hf3fs_meta/error.hpp"
#include "hf3fs_meta/types.hpp"

namespace hf3fs_meta::internal {

// A rank that fits a path segment; a worker's num_pages > 0.
std::optional<Error> check_initialize(Rank rank, std::int64_t num_pages, Role role);
// Keys (and prefix keys) valid UTF-8, keys not empty and not repeated.
std::optional<Error> check_allocate(const std::vector<BlockKey>& keys);
// Keys valid UTF-8 and not empty (a repeated key is allowed: it is asked twice).
std::optional<Error> check_lookup(Operation operation, const std::vector<std::string>& keys);
// Keys valid UTF-8, not empty and not repeated; pages not negative, none named twice, none both confirmed and
// released.
std::optional<Error> check_confirm_write(const std::vector<Confirmation>& confirmations,
                                         const std::vector<Page>& releases);
// A namespace name to send (drop_namespace's path segment): namespace_problem's rule, named "name".
std::optional<Error> check_namespace_name(Operation operation, std::string_view name);

}  // namespace hf3fs_meta::internal
