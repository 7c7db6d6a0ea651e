// The framing of a data dir's files, as leveldb's log_format.h: what log_writer writes and
// log_reader reads. Little-endian, format version 1 (kFormatVersion) for the journal; the snapshot
// (snapshot.hpp) has versions of its own behind the same file header.
//
// file header      magic (8 bytes) u32 version u32 crc32c(the 12 bytes before)
// journal record   u64 seq u32 payload_len u32 crc32c(the header's first 12 bytes)
//                  payload (payload_len bytes, record.hpp) u32 crc32c(payload)
//
// A journal's records are numbered one after another. The torn-tail rule: in the last journal file,
// what a crash cut short at the end (a file header, a record header, or a record whose sound header
// announces more bytes than there are) is dropped and reported; anything else wrong (a checksum, a
// number out of sequence, a torn record in an earlier file) is an error naming the file and the offset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace hf3fs_meta::durable {

inline constexpr std::uint32_t kFormatVersion = 1;
inline constexpr std::size_t kFileHeaderSize = 16;
inline constexpr std::size_t kRecordHeaderSize = 16;
inline constexpr std::size_t kRecordTrailerSize = 4;
inline constexpr std::string_view kJournalMagic = "HF3FSJNL";
inline constexpr std::string_view kSnapshotMagic = "HF3FSSNP";

}  // namespace hf3fs_meta::durable
