#include "durable/record.hpp"

#include "durable/log_writer.hpp"

namespace hf3fs_meta::durable {
namespace {

constexpr std::uint8_t kHasTag = 1;
constexpr std::uint8_t kHasNamespace = 2;

bool own_namespace_kind(ChangeKind kind) {
  return kind == ChangeKind::namespace_created || kind == ChangeKind::namespace_dropped;
}

}  // namespace

void encode_payload(const Change& change, const DedupTag* tag, std::string& out) {
  const bool in_named = change.ns != 0 && !own_namespace_kind(change.kind);
  put_u8(out, static_cast<std::uint8_t>(change.kind));
  put_u8(out, static_cast<std::uint8_t>((tag ? kHasTag : 0) | (in_named ? kHasNamespace : 0)));
  if (tag) {
    put_u8(out, wire_number(tag->route));
    put_bytes(out, tag->id);
    put_u64(out, tag->body_hash);
    put_u64(out, tag->body_size);
  }
  if (in_named) put_u32(out, change.ns);
  switch (change.kind) {
    case ChangeKind::rank_created:
      put_u64(out, static_cast<std::uint64_t>(change.rank));
      put_u32(out, change.num_pages);
      break;
    case ChangeKind::allocated:
      put_u64(out, static_cast<std::uint64_t>(change.rank));
      put_u32(out, static_cast<std::uint32_t>(change.allocated.size()));
      for (const AllocatedItem& item : change.allocated) {
        put_bytes(out, item.key);
        put_u32(out, item.taken);
        put_u32(out, item.page);
      }
      break;
    case ChangeKind::confirmed:
      put_u64(out, static_cast<std::uint64_t>(change.rank));
      put_u32(out, static_cast<std::uint32_t>(change.confirmed.size()));
      for (const ConfirmedItem& item : change.confirmed) {
        put_bytes(out, item.key);
        put_u32(out, item.page);
        put_u32(out, item.new_key_tp_world_size);
      }
      put_u32(out, static_cast<std::uint32_t>(change.released.size()));
      for (const std::uint32_t page : change.released) put_u32(out, page);
      put_u32(out, change.kept_mapped);
      break;
    case ChangeKind::cleared:
      break;
    case ChangeKind::rank_dropped:
      put_u64(out, static_cast<std::uint64_t>(change.rank));
      break;
    case ChangeKind::keys_deleted:
      put_u32(out, static_cast<std::uint32_t>(change.deleted.size()));
      for (const std::string_view key : change.deleted) put_bytes(out, key);
      break;
    case ChangeKind::keys_removed:
      put_u8(out, static_cast<std::uint8_t>(change.removal));
      put_u8(out, change.draining ? 1 : 0);
      put_u32(out, static_cast<std::uint32_t>(change.deleted.size()));
      for (const std::string_view key : change.deleted) put_bytes(out, key);
      break;
    case ChangeKind::page_reclaimed:
      put_u64(out, static_cast<std::uint64_t>(change.rank));
      put_u32(out, change.page);
      put_u8(out, static_cast<std::uint8_t>(change.was));
      break;
    case ChangeKind::key_drained:
      put_u32(out, change.key_id);
      break;
    case ChangeKind::page_draining:
      put_u64(out, static_cast<std::uint64_t>(change.rank));
      put_u32(out, change.page);
      put_u32(out, change.key_id);
      break;
    case ChangeKind::clock:
      put_u64(out, static_cast<std::uint64_t>(change.clock_ms));
      break;
    case ChangeKind::namespace_created:
      put_u32(out, change.ns);
      put_bytes(out, change.ns_name);
      break;
    case ChangeKind::namespace_dropped:
      put_u32(out, change.ns);
      break;
  }
}

DedupEntry dedup_entry(std::uint64_t seq, const DedupTag& tag, const Change& change, std::int64_t at_ms) {
  DedupEntry entry{seq, tag, change.kind == ChangeKind::allocated ? 200u : 204u, {}, at_ms};
  if (change.kind == ChangeKind::allocated) {
    entry.pages.reserve(change.allocated.size());
    for (const AllocatedItem& item : change.allocated) entry.pages.push_back(item.page);
  }
  return entry;
}

void encode_record(const Change& change, const DedupTag* tag, std::string& out) {
  LogWriter(out).add_record_encoded(change.seq, [&](std::string& payload) { encode_payload(change, tag, payload); });
}

Result<Record> Record::decode(std::uint64_t seq, std::string_view payload) {
  Record record;
  record.payload_.assign(payload.begin(), payload.end());
  if (auto decoded = record.decode_into(seq, {record.payload_.data(), record.payload_.size()}); !decoded) {
    return std::move(decoded).error();
  }
  return record;
}

Result<void> Record::decode_view(std::uint64_t seq, std::string_view payload) { return decode_into(seq, payload); }

namespace {

Error bad_record(std::uint64_t seq, const std::string& why, Errc code = Errc::corrupt) {
  return Error{code, "record " + std::to_string(seq) + ": " + why};
}

}  // namespace

Result<void> Record::decode_tag(Reader& in, std::uint64_t seq) {
  DedupTag tag;
  std::uint8_t route = 0;
  std::string_view id;
  if (!in.u8(route) || !in.bytes(id) || !in.u64(tag.body_hash) || !in.u64(tag.body_size)) {
    return bad_record(seq, "truncated request id");
  }
  const auto named = route_of_wire(route);
  if (!named) {
    return bad_record(seq, "unknown route " + std::to_string(route) + " (written by a newer server?)", Errc::unsupported);
  }
  tag.route = *named;
  tag.id = id;
  tag_ = std::move(tag);
  return boost::outcome_v2::success();
}

// allocated and confirmed: rank, then the items.
Result<void> Record::decode_items(Reader& in, std::uint64_t seq, std::uint64_t& rank) {
  const bool allocated = change_.kind == ChangeKind::allocated;
  const std::string what = allocated ? "allocated" : "confirmed";
  std::uint32_t n = 0;
  if (!in.u64(rank) || !in.u32(n)) return bad_record(seq, "truncated " + what);
  if (n > in.left() / 12) return bad_record(seq, what + " count " + std::to_string(n) + " past the payload");
  if (allocated) {
    allocated_.resize(n);
    for (AllocatedItem& item : allocated_) {
      if (!in.bytes(item.key) || !in.u32(item.taken) || !in.u32(item.page)) {
        return bad_record(seq, "truncated allocated item");
      }
    }
    return boost::outcome_v2::success();
  }
  confirmed_.resize(n);
  for (ConfirmedItem& item : confirmed_) {
    if (!in.bytes(item.key) || !in.u32(item.page) || !in.u32(item.new_key_tp_world_size)) {
      return bad_record(seq, "truncated confirmed item");
    }
  }
  std::uint32_t m = 0;
  if (!in.u32(m) || m > in.left() / 4) return bad_record(seq, "truncated released pages");
  released_.resize(m);
  for (std::uint32_t& page : released_) in.u32(page);
  if (!in.u32(change_.kept_mapped)) return bad_record(seq, "truncated kept count");
  return boost::outcome_v2::success();
}

// keys_removed (why, and whether draining, first) and keys_deleted: the keys.
Result<void> Record::decode_keys(Reader& in, std::uint64_t seq) {
  Change& c = change_;
  if (c.kind == ChangeKind::keys_removed) {
    std::uint8_t removal = 0;
    std::uint8_t draining = 0;
    if (!in.u8(removal) || !in.u8(draining)) return bad_record(seq, "truncated keys_removed");
    if (removal < 1 || removal > 3 || draining > 1) {
      return bad_record(seq, "unknown removal " + std::to_string(removal) + "/" + std::to_string(draining));
    }
    c.removal = static_cast<Removal>(removal);
    c.draining = draining == 1;
  }
  std::uint32_t n = 0;
  if (!in.u32(n)) return bad_record(seq, "truncated keys_deleted");
  if (n > in.left() / 4) return bad_record(seq, "deleted count " + std::to_string(n) + " past the payload");
  deleted_.resize(n);
  for (std::string_view& key : deleted_) {
    if (!in.bytes(key)) return bad_record(seq, "truncated deleted key");
  }
  return boost::outcome_v2::success();
}

// namespace_created (id, name) and namespace_dropped (id): the namespace of a record of the
// namespaces' own kinds. The default namespace is neither created nor dropped.
Result<void> Record::decode_namespace(Reader& in, std::uint64_t seq) {
  Change& c = change_;
  const bool created = c.kind == ChangeKind::namespace_created;
  const char* name = created ? "namespace_created" : "namespace_dropped";
  if (!in.u32(c.ns) || (created && !in.bytes(c.ns_name))) return bad_record(seq, std::string("truncated ") + name);
  if (c.ns == 0) return bad_record(seq, std::string(name) + " of namespace id 0 (the default namespace's)");
  if (created && c.ns_name.empty()) return bad_record(seq, "namespace_created without a name");
  return boost::outcome_v2::success();
}

Result<void> Record::decode_into(std::uint64_t seq, std::string_view payload) {
  payload_view_ = payload;
  tag_.reset();
  change_ = Change{};
  Reader in(payload);
  std::uint8_t kind = 0;
  std::uint8_t flags = 0;
  if (!in.u8(kind) || !in.u8(flags)) return bad_record(seq, "payload too short");
  if (flags & ~(kHasTag | kHasNamespace)) return bad_record(seq, "unknown flags " + std::to_string(flags));
  if (flags & kHasTag) {
    if (auto tagged = decode_tag(in, seq); !tagged) return tagged;
  }
  Change& c = change_;
  c.seq = seq;
  c.kind = static_cast<ChangeKind>(kind);
  if (flags & kHasNamespace) {
    // Written only for a named namespace, and never on the namespaces' own kinds: anything else is
    // not what a server wrote.
    if (!in.u32(c.ns)) return bad_record(seq, "truncated namespace");
    if (c.ns == 0) return bad_record(seq, "namespace flag with namespace id 0");
    if (own_namespace_kind(c.kind)) return bad_record(seq, "namespace flag on a namespace's own record");
  }
  std::uint64_t rank = 0;
  Result<void> fields = boost::outcome_v2::success();
  // The fixed-size kinds: all their fields read, or "truncated <kind>".
  auto truncated = [&](bool read, const char* name) {
    if (!read) fields = bad_record(seq, std::string("truncated ") + name);
  };
  switch (c.kind) {
    case ChangeKind::rank_created:
      truncated(in.u64(rank) && in.u32(c.num_pages), "rank_created");
      break;
    case ChangeKind::allocated:
    case ChangeKind::confirmed:
      fields = decode_items(in, seq, rank);
      break;
    case ChangeKind::cleared:
      break;
    case ChangeKind::rank_dropped:
      truncated(in.u64(rank), "rank_dropped");
      break;
    case ChangeKind::keys_removed:
    case ChangeKind::keys_deleted:
      fields = decode_keys(in, seq);
      break;
    case ChangeKind::page_reclaimed: {
      std::uint8_t was = 0;
      truncated(in.u64(rank) && in.u32(c.page) && in.u8(was), "page_reclaimed");
      c.was = static_cast<PageState>(was);
      if (fields && c.was != PageState::allocated && c.was != PageState::orphaned) {
        fields = bad_record(seq, "reclaimed page state " + std::to_string(was));
      }
      break;
    }
    case ChangeKind::key_drained:
      truncated(in.u32(c.key_id), "key_drained");
      break;
    case ChangeKind::page_draining:
      truncated(in.u64(rank) && in.u32(c.page) && in.u32(c.key_id), "page_draining");
      break;
    case ChangeKind::clock: {
      std::uint64_t ms = 0;
      truncated(in.u64(ms), "clock");
      c.clock_ms = static_cast<std::int64_t>(ms);
      break;
    }
    case ChangeKind::namespace_created:
    case ChangeKind::namespace_dropped:
      fields = decode_namespace(in, seq);
      break;
    default:
      return bad_record(seq, "unknown kind " + std::to_string(kind) + " (written by a newer server?)", Errc::unsupported);
  }
  if (!fields) return fields;
  if (in.left() != 0) return bad_record(seq, std::to_string(in.left()) + " bytes after the record's fields");
  c.rank = static_cast<Rank>(rank);
  c.allocated = allocated_;
  c.confirmed = confirmed_;
  c.released = released_;
  c.deleted = deleted_;
  return boost::outcome_v2::success();
}

}  // namespace hf3fs_meta::durable
