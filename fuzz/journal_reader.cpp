// The journal reader recovery uses (durable::replay_journal), on one file's bytes, into an empty state.
// The first byte says how the rest is read:
//  even: as the file itself (file header, record headers and checksums as the fuzzer wrote them), for
//        the header, checksum and torn-tail logic;
//  odd:  as records to frame, [u16 length][payload]..., each framed with the next sequence number
//        and right checksums, so that the payload decoder and the state's apply() are reached; a
//        length past the end frames what is left and cuts the file inside that record (a torn tail).
// What must hold: a failure is an error naming the file and the offset; a success read the whole
// file but a torn last record (and only a record that really is torn), ends at its last record,
// and leaves a consistent state (its image imports into a fresh state and comes back the same);
// every payload the decoder accepts encodes back to the same bytes.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "durable/crc32c.hpp"
#include "durable/data_dir.hpp"
#include "durable/log_format.hpp"
#include "durable/log_writer.hpp"
#include "durable/record.hpp"
#include "fuzz_support.hpp"
#include "hf3fs_meta/state.hpp"

namespace {

using namespace hf3fs_meta;

const std::filesystem::path kPath = "fuzzdir/journal-00000000000000000001.log";

// Small limits, so that a record naming a huge rank is refused instead of filling the memory.
StateOptions small_limits() { return StateOptions{4096, 8, 16384}; }

// The records of the odd mode, framed as a journal file; their payloads go to `payloads`.
std::string frame(std::string_view in, std::vector<std::string_view>& payloads) {
  std::string file = durable::file_header(durable::kJournalMagic);
  std::uint64_t seq = 1;
  while (in.size() >= 2) {
    std::uint16_t len = 0;
    std::memcpy(&len, in.data(), 2);
    in.remove_prefix(2);
    const std::size_t whole_len = std::min<std::size_t>(len, in.size());
    const std::string_view payload = in.substr(0, whole_len);
    in.remove_prefix(whole_len);
    payloads.push_back(payload);
    const std::size_t at = file.size();
    durable::LogWriter(file).add_record(seq++, payload);
    if (whole_len < len) {
      // Torn: cut the file somewhere inside the record, its header included.
      file.resize(at + (file.size() - at) * (len % 7) / 7);
      break;
    }
  }
  return file;
}

// The tail recovery cut off really is a torn record: too short for a header, or a header that is
// whole and sound but announces more bytes than there are.
bool is_torn(std::string_view tail) {
  if (tail.size() < durable::kRecordHeaderSize) return true;
  std::uint32_t len = 0;
  std::uint32_t crc = 0;
  std::memcpy(&len, tail.data() + 8, 4);
  std::memcpy(&crc, tail.data() + 12, 4);
  return crc == durable::crc32c(tail.substr(0, 12)) &&
         tail.size() < durable::kRecordHeaderSize + std::size_t{len} + durable::kRecordTrailerSize;
}

void check_consistent(const MetadataState& state) {
  const StateImage image = state.export_image();
  MetadataState copy(small_limits());
  HF3FS_FUZZ_CHECK(copy.import_image(image));
  HF3FS_FUZZ_CHECK(copy.export_image() == image);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool framed = data[0] & 1;
  const std::string_view rest = fuzz::as_text(data + 1, size - 1);
  std::vector<std::string_view> payloads;
  const std::string file = framed ? frame(rest, payloads) : std::string(rest);

  for (const std::string_view payload : payloads) {
    const auto record = durable::Record::decode(1, payload);
    if (!record) {
      HF3FS_FUZZ_CHECK(record.error().message.starts_with("record 1: "));
      continue;
    }
    const auto& tag = record.value().tag();
    std::string again;
    durable::encode_payload(record.value().change(), tag ? &*tag : nullptr, again);
    HF3FS_FUZZ_CHECK(again == payload);
  }

  MetadataState state(small_limits());
  durable::Recovered out;
  const auto replayed = durable::replay_journal(kPath, file, /*last=*/true, state, out);
  if (!replayed) {
    const std::string& message = replayed.error().message;
    HF3FS_FUZZ_CHECK(message.find(kPath.string() + " at offset ") != std::string::npos);
    return 0;
  }
  HF3FS_FUZZ_CHECK(out.journal_valid_bytes <= file.size());
  const std::string_view tail = std::string_view(file).substr(out.journal_valid_bytes);
  HF3FS_FUZZ_CHECK(out.cut.has_value() == !tail.empty());
  if (out.cut) HF3FS_FUZZ_CHECK(out.journal_valid_bytes == 0 ? file.size() < durable::kFileHeaderSize : is_torn(tail));
  HF3FS_FUZZ_CHECK(out.seq == out.records && state.seq() == out.seq);
  check_consistent(state);
  return 0;
}
