#include "client/endpoints.hpp"

#include <utility>

namespace hf3fs_meta::internal {

Endpoints::Endpoints(std::vector<std::string> configured)
    : configured_(std::move(configured)), current_(configured_.empty() ? std::string() : configured_.front()) {}

void Endpoints::current(std::string& out) const {
  std::lock_guard lock(mutex_);
  out.assign(current_);
}

void Endpoints::go_to_leader(std::string_view used, std::string_view leader) {
  std::lock_guard lock(mutex_);
  if (current_ != used) return;
  current_.assign(leader);
  // A configured leader is where round robin goes on from, should it fail in turn.
  for (std::size_t i = 0; i < configured_.size(); ++i) {
    if (configured_[i] == leader) position_ = i;
  }
}

void Endpoints::go_to_next(std::string_view used) {
  std::lock_guard lock(mutex_);
  if (current_ != used || configured_.empty()) return;
  // From a leader that was named and is not configured, the next configured one is the one after the
  // position: the position's own endpoint is where the call met the (now stale) news.
  position_ = (position_ + 1) % configured_.size();
  current_ = configured_[position_];
}

}  // namespace hf3fs_meta::internal
