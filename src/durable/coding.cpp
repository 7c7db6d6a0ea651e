#include "durable/coding.hpp"

#include <bit>
#include <cstring>

namespace hf3fs_meta::durable {
namespace {

static_assert(std::endian::native == std::endian::little, "the data directory format is little-endian");

template <class T>
void put(std::string& out, T v) {
  char bytes[sizeof v];
  std::memcpy(bytes, &v, sizeof v);
  out.append(bytes, sizeof v);
}

}  // namespace

void put_u8(std::string& out, std::uint8_t v) { out.push_back(static_cast<char>(v)); }
void put_u32(std::string& out, std::uint32_t v) { put(out, v); }
void put_u64(std::string& out, std::uint64_t v) { put(out, v); }
void put_bytes(std::string& out, std::string_view bytes) {
  put_u32(out, static_cast<std::uint32_t>(bytes.size()));
  out.append(bytes);
}

bool Reader::raw(std::size_t n, std::string_view& v) {
  if (left() < n) return false;
  v = bytes_.substr(at_, n);
  at_ += n;
  return true;
}
bool Reader::u8(std::uint8_t& v) {
  std::string_view b;
  if (!raw(1, b)) return false;
  v = static_cast<std::uint8_t>(b[0]);
  return true;
}
bool Reader::u32(std::uint32_t& v) {
  std::string_view b;
  if (!raw(sizeof v, b)) return false;
  std::memcpy(&v, b.data(), sizeof v);
  return true;
}
bool Reader::u64(std::uint64_t& v) {
  std::string_view b;
  if (!raw(sizeof v, b)) return false;
  std::memcpy(&v, b.data(), sizeof v);
  return true;
}
bool Reader::bytes(std::string_view& v) {
  std::uint32_t n = 0;
  return u32(n) && raw(n, v);
}

}  // namespace hf3fs_meta::durable
