// Namespaces (docs/design.md "State"): the core's table of them, their creation (by a
// worker's initialize only), drop, clear_all, and the calls that look at all of them.
#include <algorithm>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <utility>

#include "internal/namespace_name.hpp"
#include "state/state_impl.hpp"

namespace hf3fs_meta {

MetadataState::Core::Core(StateOptions o) : options(std::move(o)) {
  options.max_pages = std::min(options.max_pages, kPageLimit);
  lru = options.eviction == Eviction::lru;
  lease_ms = std::max<std::int64_t>(0, options.read_lease.count());
  ttl_ms = std::max<std::int64_t>(0, options.allocation_ttl.count());
  lifecycle = lru || lease_ms > 0 || ttl_ms > 0;
  default_space = &add_space(0, kDefaultNamespace);
}

MetadataState::Core::~Core() = default;

MetadataState::Impl& MetadataState::Core::add_space(std::uint32_t id, std::string_view name) {
  auto& slot = spaces[id];
  slot = std::make_unique<Impl>(*this, id, name);
  next_space_id = std::max(next_space_id, id + 1);
  if (id != 0) by_name.emplace(std::string(name), slot.get());
  return *slot;
}

MetadataState::Impl& MetadataState::Core::create_space(std::string_view name) {
  Impl& space = add_space(next_id(), name);
  Change change;
  change.kind = ChangeKind::namespace_created;
  change.ns_name = space.name;
  space.emit(change);  // ns: the new id
  return space;
}

void MetadataState::Core::remove_space(Impl& space, std::unique_ptr<Impl>& gone) {
  by_name.erase(space.name);
  const auto it = spaces.find(space.id);
  gone = std::move(it->second);
  spaces.erase(it);
}

NamespaceDropOutcome MetadataState::Core::drop_space(Impl& space, std::unique_ptr<Impl>& gone) {
  const NamespaceDropOutcome outcome{true, space.rank_slots.size(), space.total_pages, space.keys.live()};
  Change change;
  change.kind = ChangeKind::namespace_dropped;
  space.emit(change);
  remove_space(space, gone);
  return outcome;
}

StateResult<void> MetadataState::Core::check_new_space(std::string_view name, Rank rank) const {
  // The server checks the header first; this keeps a name that no header could carry out of the
  // state, its records and its images (the byte is not echoed).
  if (!valid_namespace_name(name)) {
    return make_error(StateErrc::invalid_argument, "a namespace name is " + std::string(internal::kNamespaceRule),
                      rank);
  }
  // Counted with the default namespace.
  if (static_cast<std::int64_t>(by_name.size()) + 1 < options.max_namespaces) return boost::outcome_v2::success();
  // No figures: how many namespaces exist is other tenants' business.
  return make_error(StateErrc::invalid_initialization,
                    "namespace " + std::string(name) + " does not fit: the server has reached its limit of namespaces",
                    rank);
}

// Summed over the namespaces when a rank is added (rare): no second count to keep right through
// clear, drop and import.
std::int64_t MetadataState::Core::rank_total() const {
  std::int64_t total = 0;
  for (const auto& [id, space] : spaces) {
    total += static_cast<std::int64_t>(space->rank_slots.size());
  }
  return total;
}

std::int64_t MetadataState::Core::page_total() const {
  std::int64_t total = 0;
  for (const auto& [id, space] : spaces) {
    total += space->total_pages;
  }
  return total;
}

MetadataState::Core::SharedAll::SharedAll(const Core& core) : core_(core) {
  core_.mutex.lock_shared();
  for (const auto& [id, space] : core_.spaces) space->mutex.lock_shared();  // in id order
}

MetadataState::Core::SharedAll::~SharedAll() {
  for (const auto& [id, space] : core_.spaces) space->mutex.unlock_shared();
  core_.mutex.unlock_shared();
}

MetadataState::Core::AllAccess::AllAccess(const Core& core) : core_(core) {
  if (!core_.lifecycle) {
    shared_.emplace(core_);
    return;
  }
  core_.mutex.lock();
  for (const auto& [id, space] : core_.spaces) {
    space->advance();
  }
}

MetadataState::Core::AllAccess::~AllAccess() {
  if (core_.lifecycle) core_.mutex.unlock();  // else shared_ unlocks
}

StateResult<NamespaceDropOutcome> MetadataState::drop_namespace(std::string_view name) {
  if (name.empty() || name == kDefaultNamespace) {
    return make_error(StateErrc::invalid_argument,
                      "the default namespace cannot be dropped: POST /clear in it empties it", 0);
  }
  std::unique_ptr<Impl> gone;  // freed after the lock: its ranks' page arrays
  std::unique_lock lock(core_->mutex);
  Impl* space = core_->find(NamespaceRef{name});
  if (!space) return NamespaceDropOutcome{};
  space->advance();  // what expired goes first (as drop_rank does): the outcome counts what was there
  const NamespaceDropOutcome outcome = core_->drop_space(*space, gone);
  lock.unlock();
  return outcome;
}

void MetadataState::clear_all() {
  std::vector<std::unique_ptr<Impl>> gone;  // freed after the lock
  Impl old(*core_, 0, {});                  // only swapped with
  std::unique_lock lock(core_->mutex);
  gone.reserve(core_->by_name.size());
  for (auto it = core_->spaces.begin(); it != core_->spaces.end();) {
    Impl& space = *(it++)->second;  // the next one first: the drop erases this one
    if (space.id != 0) core_->drop_space(space, gone.emplace_back());
  }
  core_->default_space->clear_into(old);
}

std::vector<NamespaceSummary> MetadataState::namespaces() const {
  std::vector<NamespaceSummary> result;
  {
    Core::AllAccess access(*core_);
    result.reserve(core_->by_name.size() + 1);
    for (const auto& [id, space] : core_->spaces) {
      NamespaceSummary& summary = result.emplace_back();
      summary.name = space->name;
      summary.pages = space->total_pages;
      summary.keys = space->keys.live();
      for (const auto& r : space->ranks) {
        if (r) summary.ranks.push_back(r->rank);
      }
    }
  }
  for (NamespaceSummary& summary : result) std::sort(summary.ranks.begin(), summary.ranks.end());
  std::sort(result.begin(), result.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return result;
}

std::vector<std::pair<std::string, StateStats>> MetadataState::all_stats() const {
  std::vector<std::pair<std::string, StateStats>> result;
  {
    Core::AllAccess access(*core_);
    result.reserve(core_->by_name.size() + 1);
    for (const auto& [id, space] : core_->spaces) {
      auto& [name, stats] = result.emplace_back(space->name, StateStats{});
      space->fill_stats(stats);
    }
  }
  std::sort(result.begin(), result.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return result;
}

std::optional<std::string> MetadataState::namespace_name(std::uint32_t id) const {
  std::shared_lock lock(core_->mutex);
  const Impl* space = core_->space(id);
  if (!space) return std::nullopt;
  return space->name;
}

std::size_t MetadataState::key_count() const {
  std::size_t total = 0;
  Core::AllAccess access(*core_);
  for (const auto& [id, space] : core_->spaces) {
    total += space->keys.live();
  }
  return total;
}

std::size_t MetadataState::rank_count() const {
  Core::AllAccess access(*core_);
  return static_cast<std::size_t>(core_->rank_total());
}

}  // namespace hf3fs_meta
