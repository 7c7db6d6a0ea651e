// Little-endian fields of the data dir's files (leveldb's util/coding.h): the payload codecs
// (record.hpp) and the snapshot format (snapshot.hpp) read and write them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace hf3fs_meta::durable {

void put_u8(std::string& out, std::uint8_t v);
void put_u32(std::string& out, std::uint32_t v);
void put_u64(std::string& out, std::uint64_t v);
void put_bytes(std::string& out, std::string_view bytes);  // u32 length, then the bytes

// Reads fields one after another; false: not enough bytes left (nothing read).
class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}
  bool u8(std::uint8_t& v);
  bool u32(std::uint32_t& v);
  bool u64(std::uint64_t& v);
  bool bytes(std::string_view& v);  // u32 length, then the bytes
  bool raw(std::size_t n, std::string_view& v);
  std::size_t offset() const noexcept { return at_; }
  std::size_t left() const noexcept { return bytes_.size() - at_; }

 private:
  std::string_view bytes_;
  std::size_t at_ = 0;
};

}  // namespace hf3fs_meta::durable
