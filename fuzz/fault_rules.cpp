// The parser of POST /_faults bodies on arbitrary input: it accepts or names what is wrong, and an
// accepted rule is one the injector can act on.
#include <algorithm>
#include <cstdint>
#include <string>

#include "fault_injector.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hf3fs_meta::server;
  const auto parsed = parse_fault_request(hf3fs_meta::fuzz::as_text(data, size));
  if (!parsed.request) {
    HF3FS_FUZZ_CHECK(!parsed.error.empty());
    return 0;
  }
  const auto& request = *parsed.request;
  if (request.forget_state) return 0;
  const auto& action = request.rule.action;
  HF3FS_FUZZ_CHECK(request.rule.times >= 1 && action.kind != FaultAction::Kind::none);
  HF3FS_FUZZ_CHECK(!request.rule.path || request.rule.path->starts_with("/"));
  if (action.kind == FaultAction::Kind::status) HF3FS_FUZZ_CHECK(action.status >= 200 && action.status <= 599);
  if (action.kind == FaultAction::Kind::delay) HF3FS_FUZZ_CHECK(action.delay.count() >= 0 && action.delay.count() <= 600000);

  // The injector fires an accepted rule for a matching request, exactly `times` times.
  FaultInjector injector;
  injector.add(request.rule);
  const std::string path = request.rule.path.value_or("/keys/batch_exists");
  const auto times = std::min<long long>(request.rule.times, 3);
  for (long long i = 0; i < times; ++i) HF3FS_FUZZ_CHECK(injector.match(path, true).kind == action.kind);
  if (request.rule.times <= 3) HF3FS_FUZZ_CHECK(injector.match(path, true).kind == FaultAction::Kind::none);
  return 0;
}
