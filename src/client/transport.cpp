#include "hf3fs_meta/transport.hpp"

#include <algorithm>
#include <cctype>

namespace hf3fs_meta {

namespace {
bool iequals(std::string_view a, std::string_view b) noexcept {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}
}  // namespace

std::optional<std::string_view> HttpResponse::header(std::string_view name) const {
  for (const auto& h : headers) {
    if (iequals(h.name, name)) return std::string_view(h.value);
  }
  return std::nullopt;
}

}  // namespace hf3fs_meta
