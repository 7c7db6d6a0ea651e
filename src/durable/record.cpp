#include "durable/record.hpp"

#include "durable/log_writer.hpp"

namespace hf3fs_meta::durable {
namespace {

constexpr std::uint8_t kHasTag = 1;

}  // namespace

void encode_payload(const Change& change, const DedupTag* tag, std::string& out) {
  put_u8(out, static_cast<std::uint8_t>(change.kind));
  put_u8(out, tag ? kHasTag : 0);
  if (tag) {
    put_u8(out, wire_number(tag->route));
    put_bytes(out, tag->id);
    put_u64(out, tag->body_hash);
    put_u64(out, tag->body_size);
  }
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

Result<void> Record::decode_into(std::uint64_t seq, std::string_view payload) {
  Record& record = *this;
  record.payload_view_ = payload;
  record.tag_.reset();
  record.change_ = Change{};
  Reader in(payload);
  std::uint8_t kind = 0;
  std::uint8_t flags = 0;
  auto fail = [&](const std::string& why, Errc code = Errc::corrupt) -> Result<void> {
    return Error{code, "record " + std::to_string(seq) + ": " + why};
  };
  if (!in.u8(kind) || !in.u8(flags)) return fail("payload too short");
  if (flags & ~kHasTag) return fail("unknown flags " + std::to_string(flags));
  if (flags & kHasTag) {
    DedupTag tag;
    std::uint8_t route = 0;
    std::string_view id;
    if (!in.u8(route) || !in.bytes(id) || !in.u64(tag.body_hash) || !in.u64(tag.body_size)) {
      return fail("truncated request id");
    }
    const auto named = route_of_wire(route);
    if (!named) return fail("unknown route " + std::to_string(route) + " (written by a newer server?)", Errc::unsupported);
    tag.route = *named;
    tag.id = id;
    record.tag_ = std::move(tag);
  }
  Change& c = record.change_;
  c.seq = seq;
  c.kind = static_cast<ChangeKind>(kind);
  std::uint64_t rank = 0;
  std::uint32_t n = 0;
  switch (c.kind) {
    case ChangeKind::rank_created:
      if (!in.u64(rank) || !in.u32(c.num_pages)) return fail("truncated rank_created");
      break;
    case ChangeKind::allocated:
      if (!in.u64(rank) || !in.u32(n)) return fail("truncated allocated");
      if (n > in.left() / 12) return fail("allocated count " + std::to_string(n) + " past the payload");
      record.allocated_.resize(n);
      for (AllocatedItem& item : record.allocated_) {
        if (!in.bytes(item.key) || !in.u32(item.taken) || !in.u32(item.page)) return fail("truncated allocated item");
      }
      break;
    case ChangeKind::confirmed: {
      if (!in.u64(rank) || !in.u32(n)) return fail("truncated confirmed");
      if (n > in.left() / 12) return fail("confirmed count " + std::to_string(n) + " past the payload");
      record.confirmed_.resize(n);
      for (ConfirmedItem& item : record.confirmed_) {
        if (!in.bytes(item.key) || !in.u32(item.page) || !in.u32(item.new_key_tp_world_size)) {
          return fail("truncated confirmed item");
        }
      }
      std::uint32_t m = 0;
      if (!in.u32(m) || m > in.left() / 4) return fail("truncated released pages");
      record.released_.resize(m);
      for (std::uint32_t& page : record.released_) in.u32(page);
      if (!in.u32(c.kept_mapped)) return fail("truncated kept count");
      break;
    }
    case ChangeKind::cleared:
      break;
    case ChangeKind::rank_dropped:
      if (!in.u64(rank)) return fail("truncated rank_dropped");
      break;
    case ChangeKind::keys_removed:
    case ChangeKind::keys_deleted: {
      if (c.kind == ChangeKind::keys_removed) {
        std::uint8_t removal = 0;
        std::uint8_t draining = 0;
        if (!in.u8(removal) || !in.u8(draining)) return fail("truncated keys_removed");
        if (removal < 1 || removal > 3 || draining > 1) return fail("unknown removal " + std::to_string(removal) + "/" + std::to_string(draining));
        c.removal = static_cast<Removal>(removal);
        c.draining = draining == 1;
      }
      if (!in.u32(n)) return fail("truncated keys_deleted");
      if (n > in.left() / 4) return fail("deleted count " + std::to_string(n) + " past the payload");
      record.deleted_.resize(n);
      for (std::string_view& key : record.deleted_) {
        if (!in.bytes(key)) return fail("truncated deleted key");
      }
      break;
    }
    case ChangeKind::page_reclaimed: {
      std::uint8_t was = 0;
      if (!in.u64(rank) || !in.u32(c.page) || !in.u8(was)) return fail("truncated page_reclaimed");
      c.was = static_cast<PageState>(was);
      if (c.was != PageState::allocated && c.was != PageState::orphaned) return fail("reclaimed page state " + std::to_string(was));
      break;
    }
    case ChangeKind::key_drained:
      if (!in.u32(c.key_id)) return fail("truncated key_drained");
      break;
    case ChangeKind::page_draining:
      if (!in.u64(rank) || !in.u32(c.page) || !in.u32(c.key_id)) return fail("truncated page_draining");
      break;
    case ChangeKind::clock: {
      std::uint64_t ms = 0;
      if (!in.u64(ms)) return fail("truncated clock");
      c.clock_ms = static_cast<std::int64_t>(ms);
      break;
    }
    default:
      return fail("unknown kind " + std::to_string(kind) + " (written by a newer server?)", Errc::unsupported);
  }
  if (in.left() != 0) return fail(std::to_string(in.left()) + " bytes after the record's fields");
  c.rank = static_cast<Rank>(rank);
  c.allocated = record.allocated_;
  c.confirmed = record.confirmed_;
  c.released = record.released_;
  c.deleted = record.deleted_;
  return boost::outcome_v2::success();
}

}  // namespace hf3fs_meta::durable
