#include "tenants.hpp"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <utility>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "hf3fs_meta/state.hpp"  // kDefaultNamespace
#include "internal/namespace_name.hpp"
#include "internal/token_file.hpp"

namespace hf3fs_meta::server {
namespace {

constexpr std::string_view kOperator = "*";

bool blank(char c) noexcept { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

// A line's whitespace-separated fields, up to a field that starts with '#' (a comment: a token may
// hold a '#', it may not start with one). Counts up to 3: only "exactly two" matters.
struct Fields {
  std::size_t count = 0;
  std::string_view field[2];
};
Fields split(std::string_view line) {
  Fields out;
  std::size_t i = 0;
  while (out.count < 3) {
    while (i < line.size() && blank(line[i])) ++i;
    if (i == line.size() || line[i] == '#') break;
    const std::size_t start = i;
    while (i < line.size() && !blank(line[i])) ++i;
    if (out.count < 2) out.field[out.count] = line.substr(start, i - start);
    ++out.count;
  }
  return out;
}

std::string at_line(std::string_view path, std::size_t line, std::string_view what) {
  return "--tenants-file " + std::string(path) + ": line " + std::to_string(line) + ": " + std::string(what);
}

}  // namespace

TenantTable::Digest TenantTable::digest(std::string_view token) {
  Digest out{};
  unsigned int size = 0;
  if (EVP_Digest(token.data(), token.size(), out.data(), &size, EVP_sha256(), nullptr) != 1 || size != out.size()) {
    throw std::runtime_error("SHA-256 of a bearer token failed (OpenSSL EVP_Digest)");
  }
  return out;
}

TenantTable::Parsed TenantTable::parse(std::string_view path, std::string_view text, std::string_view operator_token) {
  // By digest: a token given twice is found as it is read, so the error names its first two lines.
  std::map<Digest, Entry> entries;
  if (!operator_token.empty()) {
    const Digest d = digest(operator_token);
    entries.emplace(d, Entry{d, Principal{true, {}}, 0});
  }
  std::size_t number = 0;
  while (!text.empty()) {
    ++number;
    const std::size_t end = std::min(text.find('\n'), text.size());
    const Fields f = split(text.substr(0, end));
    text.remove_prefix(std::min(end + 1, text.size()));
    if (f.count == 0) continue;  // blank, or a comment
    if (f.count != 2) {
      return {nullptr, at_line(path, number, "`TOKEN NAMESPACE` expected (NAMESPACE `*` for an operator), found " +
                                                 std::to_string(f.count == 1 ? 1 : 3) +
                                                 (f.count == 1 ? " field" : " or more fields"))};
    }
    const std::string_view token = f.field[0];
    const std::string_view name = f.field[1];
    if (auto problem = internal::token_problem(token)) return {nullptr, at_line(path, number, "the token: " + *problem)};
    const bool is_operator = name == kOperator;
    if (!is_operator) {
      if (auto problem = internal::namespace_problem(name)) {
        return {nullptr, at_line(path, number, "the namespace " + *problem + ", or `*` for an operator")};
      }
    }
    const Digest d = digest(token);
    auto [it, added] =
        entries.emplace(d, Entry{d, Principal{is_operator, is_operator || name == kDefaultNamespace ? "" : std::string(name)},
                                 number});
    if (added) continue;
    if (it->second.line == 0) {
      if (is_operator) continue;  // --auth-token-file's token again, as what it is
      return {nullptr, at_line(path, number,
                               "this is --auth-token-file's token, an operator's: it can only be `*` here")};
    }
    return {nullptr, at_line(path, number,
                             "the token of line " + std::to_string(it->second.line) + " again (a token has one namespace)")};
  }
  if (entries.empty()) {
    return {nullptr, "--tenants-file " + std::string(path) + ": no token in it (every request but /healthz would get 401)"};
  }
  auto table = std::make_shared<TenantTable>();
  table->entries_.reserve(entries.size());
  for (auto& [d, entry] : entries) {
    table->operators_ += entry.principal.operator_access ? 1 : 0;
    table->entries_.push_back(std::move(entry));
  }
  return {std::move(table), {}};
}

TenantTable::Parsed TenantTable::read(const std::string& path, std::string_view operator_token) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {nullptr, "--tenants-file " + path + ": cannot be read"};
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return {nullptr, "--tenants-file " + path + ": cannot be read"};
  return parse(path, text, operator_token);
}

const Principal* TenantTable::find(std::string_view token) const {
  const Digest d = digest(token);
  auto it = std::lower_bound(entries_.begin(), entries_.end(), d,
                             [](const Entry& e, const Digest& key) { return e.digest < key; });
  return it != entries_.end() && it->digest == d ? &it->principal : nullptr;
}

Tenants::Tenants(std::shared_ptr<const TenantTable> table) : table_(std::move(table)) {
  if (!table_) throw std::invalid_argument("Tenants needs a table");
}

const Principal* Tenants::resolve(std::string_view token, TenantCache& cache) const {
  if (cache.generation == generation_.load(std::memory_order_acquire) && cache.token.size() == token.size() &&
      CRYPTO_memcmp(cache.token.data(), token.data(), token.size()) == 0) {
    return cache.principal;
  }
  {
    // The table and its generation, as one pair (reload swaps both under the lock).
    const std::lock_guard<std::mutex> lock(mutex_);
    cache.table = table_;
    cache.generation = generation_.load(std::memory_order_relaxed);
  }
  cache.token.assign(token.data(), token.size());
  cache.principal = cache.table->find(token);
  return cache.principal;
}

TenantTable::Parsed Tenants::reload(const std::string& path, std::string_view operator_token) {
  auto parsed = TenantTable::read(path, operator_token);
  if (!parsed.table) return parsed;
  std::shared_ptr<const TenantTable> old;  // released after the lock
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    old = std::exchange(table_, parsed.table);
    generation_.fetch_add(1, std::memory_order_release);
  }
  return parsed;
}

std::shared_ptr<const TenantTable> Tenants::table() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return table_;
}

}  // namespace hf3fs_meta::server
