// Journal records framed as the journal writes them (log_format.hpp), with payloads that do not
// matter: for tests of what reads only the framing (the replicated log's writer and followers).
#pragma once

#include <cstdint>
#include <string>

#include "durable/log_writer.hpp"

namespace hf3fs_meta::testing {

// Records `first` to `last`, one after another.
inline std::string framed_records(std::uint64_t first, std::uint64_t last) {
  std::string out;
  durable::LogWriter writer(out);
  for (std::uint64_t seq = first; seq <= last; ++seq) writer.add_record_encoded(seq, [](std::string& p) { p += 'x'; });
  return out;
}

}  // namespace hf3fs_meta::testing
