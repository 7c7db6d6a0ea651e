// The whole protocol as the server runs it (routing, request decoding, the state model) on a
// sequence of arbitrary requests against a fresh state. One request per line:
//   METHOD TARGET BODY...
// Every answer must be a well-formed one: a status in 200..599, and a JSON body whenever the
// content type says so.
#include <cstdint>
#include <string_view>

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
    const auto space = line.find(' ');
    const std::string_view method = line.substr(0, space);
    line = space == std::string_view::npos ? std::string_view() : line.substr(space + 1);
    const auto space2 = line.find(' ');
    const std::string_view target = line.substr(0, space2);
    const std::string_view body = space2 == std::string_view::npos ? std::string_view() : line.substr(space2 + 1);

    const RoutedTarget routed = Service::route(method, target);
    const auto answer = service.handle(routed, body);
    HF3FS_FUZZ_CHECK(answer.status >= 200 && answer.status <= 599);
    HF3FS_FUZZ_CHECK((routed.route == Route::not_found) == (answer.status == 404 && !route_info(routed.endpoint).is_endpoint()));
    HF3FS_FUZZ_CHECK((routed.route == Route::method_not_allowed) == (answer.status == 405));
    HF3FS_FUZZ_CHECK((routed.route == Route::redirect) == (answer.status == 307));
    if (answer.content_type == "application/json") {
      rapidjson::Document doc;
      HF3FS_FUZZ_CHECK(fuzz::parse_object(answer.body, doc));
    }
  }
  return 0;
}
