// The snapshot reader recovery uses (durable::read_snapshot) on a file's bytes, then the import of
// its image into an empty state. The first byte says how the rest is read:
//  even: as the file itself (file header and checksum as the fuzzer wrote them);
//  odd:  as the body between the file header and the checksum, which are added right, so that the
//        parser and the image's consistency checks are reached; bits 1-3 choose the version: 0
//        version 1, 1 version 2 (the cache lifecycle's section follows the free key ids), 2
//        version 3 (that section, and the request-id answers in their compact form), 3 version 4
//        (the TTL's reclaim marks after the timed keys), 4 and above version 5 (the named
//        namespaces after the marks, and each answer's namespace).
// What must hold: a failure is an error naming the file; a snapshot that loads and imports gives
// exactly its image back (never a part of it), and every request-id entry an older version holds
// (a whole journal payload) is an allocate's 200 or another change's 204.
#include <cstdint>
#include <string>
#include <string_view>

#include "durable/crc32c.hpp"
#include "durable/log_reader.hpp"
#include "durable/log_writer.hpp"
#include "durable/record.hpp"
#include "durable/snapshot.hpp"
#include "fuzz_support.hpp"
#include "hf3fs_meta/state.hpp"

namespace {

using namespace hf3fs_meta;

const std::filesystem::path kPath = "fuzzdir/snapshot-00000000000000000001.snap";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view rest = fuzz::as_text(data + 1, size - 1);
  std::string file;
  if (data[0] & 1) {
    const int choice = (data[0] >> 1) & 7;
    file = durable::file_header(durable::kSnapshotMagic, choice == 0   ? durable::kFormatVersion
                                                         : choice == 1 ? durable::kSnapshotLifecycleVersion
                                                         : choice == 2 ? durable::kSnapshotDedupVersion
                                                         : choice == 3 ? durable::kSnapshotReclaimVersion
                                                                       : durable::kSnapshotNamespaceVersion);
    file.append(rest);
    durable::put_u32(file, durable::crc32c(rest));
  } else {
    file = rest;
  }

  auto loaded = durable::read_snapshot(kPath, file);
  if (!loaded) {
    HF3FS_FUZZ_CHECK(loaded.error().message.find(kPath.string()) != std::string::npos);
    return 0;
  }
  const auto version = durable::check_file_header(file, durable::kSnapshotMagic, durable::kSnapshotNewestVersion);
  HF3FS_FUZZ_CHECK(version.has_value());
  for (const durable::DedupEntry& entry : loaded.value().dedup) {
    if (version.value() < durable::kSnapshotDedupVersion) HF3FS_FUZZ_CHECK(entry.status == 200 || entry.status == 204);
  }
  const StateImage image = loaded.value().image;
  // Small limits, as a server with small --max-* flags would have.
  MetadataState state(StateOptions{4096, 8, 16384});
  if (!state.import_image(std::move(loaded.value().image))) return 0;
  HF3FS_FUZZ_CHECK(state.seq() == image.seq);
  // Without --allocation-ttl-ms a state keeps no reclaim times (as a server restarted without it).
  StateImage expected = image;
  expected.timed_pages.clear();
  expected.timed_keys.clear();
  expected.clock_ms.reset();
  for (NamespaceImage& n : expected.namespaces) {
    n.space.timed_pages.clear();
    n.space.timed_keys.clear();
  }
  HF3FS_FUZZ_CHECK(state.export_image() == expected);
  return 0;
}
