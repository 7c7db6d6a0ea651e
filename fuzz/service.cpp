// The whole protocol as the server runs it (routing, request decoding, the state model) on a
// sequence of arbitrary requests against a fresh state. One request per line:
//   METHOD TARGET BODY...
// or, acting in a namespace (X-Hf3fs-Namespace, which the server has checked by then):
//   @NAME METHOD TARGET BODY...
// Every answer must be a well-formed one: a status in 200..599, and a JSON body whenever the
// content type says so. At the end every namespace listed has a valid name, and its summary agrees
// with its stats.
#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include "hf3fs_meta/routes.hpp"

#include "fuzz_support.hpp"
#include "hf3fs_meta/service.hpp"
#include "hf3fs_meta/state.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hf3fs_meta;
  std::string_view input = fuzz::as_text(data, size);
  MetadataState state(StateOptions{.max_pages = 4096});  // small, so a rank costs little
  Service service(state);
  while (!input.empty()) {
    const auto end = input.find('\n');
    std::string_view line = input.substr(0, end);
    input = end == std::string_view::npos ? std::string_view() : input.substr(end + 1);
    std::string_view ns;
    if (line.starts_with('@')) {
      const auto space = line.find(' ');
      ns = line.substr(1, space == std::string_view::npos ? line.size() : space - 1);
      line = space == std::string_view::npos ? std::string_view() : line.substr(space + 1);
      if (!valid_namespace_name(ns)) continue;  // the server answers 400 before Service
    }
    const auto space = line.find(' ');
    const std::string_view method = line.substr(0, space);
    line = space == std::string_view::npos ? std::string_view() : line.substr(space + 1);
    const auto space2 = line.find(' ');
    const std::string_view target = line.substr(0, space2);
    const std::string_view body = space2 == std::string_view::npos ? std::string_view() : line.substr(space2 + 1);

    const RoutedTarget routed = Service::route(method, target);
    const auto answer = service.handle(routed, body, ns);
    HF3FS_FUZZ_CHECK(answer.status >= 200 && answer.status <= 599);
    HF3FS_FUZZ_CHECK((routed.route == Route::not_found) == (answer.status == 404 && !route_info(routed.endpoint).is_endpoint()));
    HF3FS_FUZZ_CHECK((routed.route == Route::method_not_allowed) == (answer.status == 405));
    HF3FS_FUZZ_CHECK((routed.route == Route::redirect) == (answer.status == 307));
    if (answer.content_type == "application/json") {
      rapidjson::Document doc;
      HF3FS_FUZZ_CHECK(fuzz::parse_object(answer.body, doc));
    }
  }
  for (const NamespaceSummary& n : state.namespaces()) {
    HF3FS_FUZZ_CHECK(valid_namespace_name(n.name));
    const StateStats stats = state.stats(NamespaceRef{n.name});
    std::vector<Rank> ranks;  // the summary's are sorted
    std::int64_t pages = 0;
    for (const auto& [rank, r] : stats.ranks) {
      ranks.push_back(rank);
      pages += r.num_pages;
    }
    std::sort(ranks.begin(), ranks.end());
    HF3FS_FUZZ_CHECK(ranks == n.ranks && pages == n.pages);
  }
  return 0;
}
