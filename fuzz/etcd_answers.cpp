// etcd's JSON gateway answers (mock_server/ha/etcd_codec.hpp) on arbitrary bytes. The first byte
// picks the decoder; the rest is the answer. Nothing may crash, and what a decoder accepts must be
// what the text says: every key and value it hands on is the base64 of a string in the text, and
// base64 round-trips any bytes.
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_support.hpp"
#include "ha/etcd_codec.hpp"

namespace {

using namespace hf3fs_meta::server::ha;

// A key or value a decoder read must have been in the text, as its base64.
bool in_text(std::string_view body, const std::string& bytes) {
  return bytes.empty() || body.find(base64_encode(bytes)) != std::string_view::npos;
}

bool kvs_in_text(std::string_view body, const std::vector<KeyValue>& kvs) {
  for (const KeyValue& kv : kvs) {
    if (!in_text(body, kv.key) || !in_text(body, kv.value)) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view body = hf3fs_meta::fuzz::as_text(data + 1, size - 1);
  const auto decoded = base64_decode(base64_encode(body));
  HF3FS_FUZZ_CHECK(decoded && decoded.value() == body);
  switch (data[0] % 8) {
    case 0: {
      const auto range = decode_range(body);
      if (range) HF3FS_FUZZ_CHECK(kvs_in_text(body, range.value().kvs));
      break;
    }
    case 1: {
      const auto txn = decode_txn(body);
      if (!txn) break;
      for (const auto& response : txn.value().responses) {
        if (const auto* range = std::get_if<RangeResponse>(&response)) HF3FS_FUZZ_CHECK(kvs_in_text(body, range->kvs));
      }
      break;
    }
    case 2: {
      const auto watch = decode_watch_line(body);
      if (!watch) break;
      for (const WatchEvent& event : watch.value().events) {
        HF3FS_FUZZ_CHECK(in_text(body, event.kv.key) && in_text(body, event.kv.value));
      }
      break;
    }
    case 3: {
      const auto grant = decode_lease_grant(body);
      if (grant) HF3FS_FUZZ_CHECK(grant.value().id != 0 && grant.value().ttl > 0);
      break;
    }
    case 4:
      (void)decode_lease_keepalive(body);
      break;
    case 5:
      (void)decode_put(body);
      (void)decode_delete(body);
      (void)decode_header_revision(body);
      break;
    case 6: {
      const GatewayError error = decode_error(body);
      HF3FS_FUZZ_CHECK(error.code >= 0 && error.code < 100 && (!error.message.empty() || body.empty()));
      break;
    }
    default: {
      const auto bytes = base64_decode(body);
      if (bytes) HF3FS_FUZZ_CHECK(bytes.value().size() == body.size() / 4 * 3 - (body.ends_with("==") ? 2 : body.ends_with('=') ? 1 : 0));
      break;
    }
  }
  return 0;
}
