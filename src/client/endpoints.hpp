// The endpoints of a client (ClientOptions::endpoints, else base_url) and the one its calls go to
// now, shared by every call and thread of the client (docs/design.md, "Endpoints"). A member that is
// not the leader names the leader (X-Hf3fs-Leader) or does not; a member that does not answer
// cannot say: the calls' attempts tell this object, which moves the current endpoint on.
#pragma once

#include <cstddef>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace hf3fs_meta::internal {

class Endpoints {
 public:
  // `configured`: valid (endpoint_list_problem), normalized (normalized_endpoint), at least one.
  explicit Endpoints(std::vector<std::string> configured);

  // The endpoint to send to now, into `out` (a request's own string, so that its capacity is reused).
  void current(std::string& out) const;

  // An attempt sent to `used` found a member that is not the leader and names `leader` (a valid,
  // normalized endpoint, which need not be configured): calls go there. Moves nothing when the
  // current endpoint is no longer `used` (another call moved it on since: its news is newer).
  void go_to_leader(std::string_view used, std::string_view leader);

  // An attempt sent to `used` found no leader there and no word of one (no answer, or a member that
  // is not the leader and knows none): calls go to the configured endpoint after the one they were
  // at, round robin. A leader named earlier goes on from where the configured list was. Moves
  // nothing when the current endpoint is no longer `used`.
  void go_to_next(std::string_view used);

 private:
  const std::vector<std::string> configured_;
  mutable std::mutex mutex_;
  std::size_t position_ = 0;  // of configured_: where round robin goes on from
  std::string current_;       // configured_[position_], or a leader named
};

}  // namespace hf3fs_meta::internal
