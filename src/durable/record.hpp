// The journal's payload codecs: a Change (and the DedupTag of the request that made it) to the bytes
// of a record's payload and back. The framing around a payload is log_format.hpp's.
//
// payload: u8 kind (ChangeKind; new kinds get new numbers, a reader refuses a kind it does not know,
//          naming its number: the cache lifecycle's kinds 7-11 came later without a new version)
//          u8 flags (bit 0: a DedupTag follows; bit 1: the record's namespace follows)
//          [tag: u8 route (its wire number, RouteInfo::wire), u32 length, id, u64 body hash, u64 body size]
//          [namespace: u32 id, never 0: a record of the default namespace has no bit 1, so
//           it is byte for byte what a server before namespaces wrote]
//          then the kind's fields (record.cpp). The namespaces' own kinds carry the namespace in their
//          fields, never in bit 1: 12 namespace_created u32 id, u32 length, name; 13 namespace_dropped
//          u32 id (an older server refuses them: "unknown kind 12", "unknown flags 2").
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "durable/coding.hpp"
#include "durable/error.hpp"
#include "hf3fs_meta/routes.hpp"
#include "hf3fs_meta/state.hpp"

namespace hf3fs_meta::durable {

// The request-id deduplication entry of a request that carried X-Request-Id: with it a restarted
// server answers a repeat as the first attempt was answered.
struct DedupTag {
  // On disk as its wire number (RouteInfo::wire). Format versions 1-4 were specified as writing the
  // route's row in kRoutes; the wire numbers were given as those rows (as of bad7982, the last
  // release before them), so files of every version read alike and no position needs mapping.
  Route route = Route::not_found;
  std::string id;
  std::uint64_t body_hash = 0;
  std::uint64_t body_size = 0;
  // The namespace's name; empty: the default one. Not in the tag's bytes of a record (the record's
  // namespace is its own, named by recovery), in a snapshot's answers from version 5 on. Braced, so
  // that an aggregate initializer may leave it out without GCC's -Wmissing-field-initializers.
  std::string ns{};
  friend bool operator==(const DedupTag&, const DedupTag&) = default;
};

// A request-id answer in the compact form the server's dedup cache keeps it in
// (mock_server/dedup_cache.hpp): no key names, 4 bytes a page. The journal keeps the last ones
// within --dedup-max-bytes for the next snapshot, the snapshot stores them, recovery hands them to
// the cache: a clean restart keeps the ids memory kept.
struct DedupEntry {
  std::uint64_t seq = 0;  // the record of the change it answered
  DedupTag tag;
  std::uint32_t status = 0;
  std::vector<std::uint32_t> pages;  // an allocate's answer, kNoPage32 where it gave none
  std::int64_t at_ms = 0;  // when it was recorded (system clock, ms); 0: unknown (taken as "just now")
  friend bool operator==(const DedupEntry&, const DedupEntry&) = default;
};
// The entry of a tagged record's change: an allocate was answered 200 with its pages, the rest 204.
DedupEntry dedup_entry(std::uint64_t seq, const DedupTag& tag, const Change& change, std::int64_t at_ms = 0);
// What an entry weighs against --dedup-max-bytes, in the cache, the journal's retention and so the
// snapshot alike: the entry, its map node and its place in the expiry queue (rounded up), its key (the
// route's letter, the id, and a named namespace's name with the two bytes that frame it in the cache's
// key, mock_server/dedup_cache.cpp), its pages. The namespace is a parameter of its own so that no
// caller weighs an entry without it (`ns`: as DedupTag::ns, empty for the default one: the router
// names it so whether a request named it `default` or not at all).
inline constexpr std::size_t kDedupEntryOverhead = 256;
constexpr std::size_t dedup_weight(std::string_view ns, std::string_view id, std::size_t pages) noexcept {
  return kDedupEntryOverhead + 1 + id.size() + (ns.empty() ? 0 : ns.size() + 2) + pages * sizeof(std::uint32_t);
}

// A decoded record. Owns the bytes that change()'s views point into (moving keeps them in place),
// unless decoded in place (decode_view).
class Record {
 public:
  Record() = default;  // empty: for decode_view
  Record(Record&&) = default;
  Record& operator=(Record&&) = default;
  Record(const Record&) = delete;
  Record& operator=(const Record&) = delete;

  std::uint64_t seq() const noexcept { return change_.seq; }
  const Change& change() const noexcept { return change_; }
  const std::optional<DedupTag>& tag() const noexcept { return tag_; }
  std::string_view payload() const noexcept { return payload_view_; }

  // Decodes a payload into a record that owns a copy of it; an error names the record and what is
  // wrong (the caller adds file and offset).
  static Result<Record> decode(std::uint64_t seq, std::string_view payload);
  // Decodes a payload into this record, reusing its storage; its views then point into `payload`
  // (not copied: replay decodes each record once, keeping of a tagged one only its DedupEntry).
  Result<void> decode_view(std::uint64_t seq, std::string_view payload);

 private:
  Result<void> decode_into(std::uint64_t seq, std::string_view payload);
  Result<void> decode_tag(Reader& in, std::uint64_t seq);
  Result<void> decode_items(Reader& in, std::uint64_t seq, std::uint64_t& rank);
  Result<void> decode_keys(Reader& in, std::uint64_t seq);
  Result<void> decode_namespace(Reader& in, std::uint64_t seq);
  std::vector<char> payload_;
  std::string_view payload_view_;  // payload_'s bytes, or the bytes decode_view was given
  Change change_;
  std::optional<DedupTag> tag_;
  std::vector<AllocatedItem> allocated_;
  std::vector<ConfirmedItem> confirmed_;
  std::vector<std::uint32_t> released_;
  std::vector<std::string_view> deleted_;
};

// Appends a change's payload (no header) to `out`.
void encode_payload(const Change& change, const DedupTag* tag, std::string& out);
// Appends a whole record (header, payload, trailer) to `out`: the payload encoded in place.
void encode_record(const Change& change, const DedupTag* tag, std::string& out);

}  // namespace hf3fs_meta::durable
