// The in-process transport: a Client whose requests are answered by a Service over a MetadataState
// in this process, through the same codec as the server. Server-side: it links hf3fs_meta::service
// (the state model with it), which a program that only talks to a server never needs.
#pragma once

#include <memory>

#include "hf3fs_meta/state.hpp"
#include "hf3fs_meta/transport.hpp"

namespace hf3fs_meta {

// Calls a Service over `state` in this process. Timeouts do not apply, and answers never carry
// X-Request-Id-Dedup (Service keeps no request ids). A null state gets a fresh one.
std::shared_ptr<Transport> make_in_process_transport(std::shared_ptr<MetadataState> state);

}  // namespace hf3fs_meta
