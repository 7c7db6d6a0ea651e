// Compiles only if the SDK's headers leave the server's state model out: each name below is declared
// here as an alias of int, which a declaration of the same name as a class (even a forward one) or as
// another alias makes ill-formed. CMakeLists.txt compiles it as it is, and checks that with
// PROBE_WITH_STATE (state.hpp included) it does not compile, so that the probe can fail.
#include <hf3fs_meta/client.hpp>
#include <hf3fs_meta/connection.hpp>
#include <hf3fs_meta/mocks/mock_connection.hpp>
#ifdef PROBE_WITH_STATE
#include <hf3fs_meta/state.hpp>
#endif

namespace hf3fs_meta {
using MetadataState = int;
using Change = int;
using ChangeSink = int;
using StateImage = int;
}  // namespace hf3fs_meta

int probe_stats_are_public() { return static_cast<int>(hf3fs_meta::StateStats{}.ranks.size()); }
