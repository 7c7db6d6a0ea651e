// Randomized property test: MetadataState against a small model written the obvious way (a deque for
// the pool, linear searches, every call applied to a copy that is kept only if the call succeeds).
// Every answer, every refusal and everything observable afterwards must be the same.
// The second test switches the cache lifecycle on (eviction, leases, reclaim, deletion) with a fake
// clock; the model keeps a use counter per key and finds victims and expirations by searching all
// of them.
// Every run acts in three namespaces (the default one and two named), each with a model of its own:
// whatever one namespace does, the others' models must still match (the namespaces' isolation), and a
// named namespace may be dropped and made again.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <memory>
#include <tuple>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "hf3fs_meta/state.hpp"
#include "state/state_snapshot.hpp"

namespace hf3fs_meta {
namespace {

using testing::Snapshot;

struct ModelRank {
  std::int64_t num_pages = 0;
  std::deque<Page> pool;
  std::vector<PageState> state;    // meaningful for pages not in the pool
  std::vector<std::string> owner;  // for mapped (and draining) pages
  std::vector<std::string> allocated_for;  // for allocated pages
  std::vector<std::int64_t> since;      // when the page became allocated or orphaned
  std::vector<std::uint64_t> since_seq;  // and in which order
  std::vector<bool> after_reclaim;       // reclaimed by the TTL, not confirmed nor released since
  std::uint64_t kept = 0;
  bool is_free(Page p) const { return std::find(pool.begin(), pool.end(), p) != pool.end(); }
};

struct ModelKey {
  std::int64_t tp = 0;
  std::map<Rank, Page> pages;
  // Lifecycle.
  std::uint64_t recency = 0;                 // the sequence number of its latest use
  std::optional<std::int64_t> lease_end;     // leased until then
  std::uint64_t lease_seq = 0;               // when the lease began, in sequence
  std::int64_t incomplete_since = 0;         // created, or stopped being complete
  std::uint64_t incomplete_seq = 0;
  // A page orphaned under the key's lease (in Model::draining): drains at the key's lease end, after
  // the key's own lease event, the newest such page first (it is placed right after the key).
  std::int64_t order = 0;
  bool complete() const { return static_cast<std::int64_t>(pages.size()) == tp; }
};

struct Lifecycle {
  bool lru = false;
  std::int64_t lease = 0;
  std::int64_t ttl = 0;
  bool on() const { return lru || lease > 0 || ttl > 0; }
};

struct ModelCounters {
  std::uint64_t evicted = 0, deleted = 0, reclaimed_keys = 0, reclaimed_allocated = 0, reclaimed_orphaned = 0;
  friend bool operator==(const ModelCounters&, const ModelCounters&) = default;
};

template <class T>
using ModelResult = std::variant<T, StateError>;

struct Model {
  std::int64_t max_pages = 0;
  std::map<Rank, ModelRank> ranks;
  std::map<std::string, ModelKey> keys;
  Lifecycle life;
  std::int64_t now = 0;
  std::uint64_t seq = 0;
  std::vector<ModelKey> draining;  // deleted under a lease, and pages orphaned under their key's lease
  std::int64_t orphans_drained = 0;
  ModelCounters counters;

  void clear() {
    ranks.clear();
    keys.clear();
    draining.clear();
  }

  // ---- Lifecycle, the obvious way.
  void use(ModelKey& k, bool read) {
    if (read && life.lease > 0) {
      k.lease_end = now + life.lease;
      k.lease_seq = ++seq;
    } else if (!k.lease_end) {
      k.recency = ++seq;
    }
  }
  void free_page(Rank rank, Page p) {
    ModelRank& r = ranks[rank];
    r.state[p] = PageState::free;
    r.owner[p] = "";
    r.after_reclaim[p] = false;
    r.pool.push_back(p);
  }
  void remove(const std::string& name) {
    ModelKey k = keys[name];
    keys.erase(name);
    if (k.lease_end) {
      for (const auto& [rank, p] : k.pages) ranks[rank].state[p] = PageState::draining;
      draining.push_back(k);
      return;
    }
    for (const auto& [rank, p] : k.pages) free_page(rank, p);
  }
  void timed(Rank rank, Page p) {
    ranks[rank].since[p] = now;
    ranks[rank].since_seq[p] = ++seq;
  }
  // Everything that expired by `t`, earliest first; at one instant leases, then pages, then keys.
  void advance(std::int64_t t) {
    if (!life.on()) return;
    now = std::max(now, t);
    using Event = std::tuple<std::int64_t, int, std::uint64_t, std::int64_t>;  // time, class, sequence, order
    for (;;) {
      std::optional<Event> first;
      std::function<void()> apply;
      auto consider = [&](Event e, std::function<void()> f) {
        if (std::get<0>(e) <= now && (!first || e < *first)) {
          first = e;
          apply = std::move(f);
        }
      };
      for (auto& [name, k] : keys) {
        if (k.lease_end) {
          consider({*k.lease_end, 0, k.lease_seq, 0}, [&k, this] {
            k.lease_end.reset();
            if (k.complete()) k.recency = ++seq;
          });
        }
        if (life.ttl > 0 && !k.complete()) {
          consider({k.incomplete_since + life.ttl, 2, k.incomplete_seq, 0}, [this, n = name] {
            ++counters.reclaimed_keys;
            remove(n);
          });
        }
      }
      for (std::size_t i = 0; i < draining.size(); ++i) {
        consider({*draining[i].lease_end, 0, draining[i].lease_seq, draining[i].order}, [this, i] {
          for (const auto& [rank, p] : draining[i].pages) free_page(rank, p);
          draining.erase(draining.begin() + static_cast<std::ptrdiff_t>(i));
        });
      }
      if (life.ttl > 0) {
        for (auto& [rank, r] : ranks) {
          for (Page p = 0; p < r.num_pages; ++p) {
            if (r.is_free(p) || (r.state[p] != PageState::allocated && r.state[p] != PageState::orphaned)) continue;
            consider({r.since[p] + life.ttl, 1, r.since_seq[p], 0}, [this, rank = rank, p] {
              ++(ranks[rank].state[p] == PageState::allocated ? counters.reclaimed_allocated
                                                               : counters.reclaimed_orphaned);
              free_page(rank, p);
              ranks[rank].after_reclaim[p] = true;
            });
          }
        }
      }
      if (!first) return;
      apply();
    }
  }
  // The least recently used complete key, not leased, with a page on the rank, not in the batch.
  std::optional<std::string> victim(Rank rank, const std::vector<BlockKey>& batch) {
    std::optional<std::string> best;
    for (const auto& [name, k] : keys) {
      if (!k.complete() || k.lease_end || !k.pages.count(rank)) continue;
      if (std::any_of(batch.begin(), batch.end(), [&](const BlockKey& b) { return b.key == name; })) continue;
      if (!best || k.recency < keys[*best].recency) best = name;
    }
    return best;
  }

  std::vector<bool> delete_keys(const std::vector<std::string>& ks) {
    std::vector<bool> result;
    for (const auto& k : ks) {
      result.push_back(keys.count(k) > 0);
      if (keys.count(k)) {
        ++counters.deleted;
        remove(k);
      }
    }
    return result;
  }

  StateStats stats() const {
    StateStats st;
    for (const auto& [rank, r] : ranks) {
      RankStats rs;
      rs.num_pages = r.num_pages;
      for (Page p = 0; p < r.num_pages; ++p) {
        const PageState ps = r.is_free(p) ? PageState::free : r.state[p];
        ++(ps == PageState::free        ? rs.free
           : ps == PageState::allocated ? rs.allocated
           : ps == PageState::mapped    ? rs.mapped
           : ps == PageState::orphaned  ? rs.orphaned
                                        : rs.draining);
      }
      rs.kept_on_release = r.kept;
      st.ranks.emplace_back(rank, rs);
    }
    for (const auto& [name, k] : keys) {
      ++(k.complete() ? st.keys_complete : st.keys_incomplete);
      if (k.lease_end) ++st.keys_leased;
    }
    st.keys_leased += draining.size();
    st.evicted_keys = counters.evicted;
    st.deleted_keys = counters.deleted;
    st.reclaimed_keys = counters.reclaimed_keys;
    st.reclaimed_allocated_pages = counters.reclaimed_allocated;
    st.reclaimed_orphaned_pages = counters.reclaimed_orphaned;
    return st;
  }

  static StateError error(StateErrc kind, std::string message, Rank rank, std::optional<std::size_t> index = {}) {
    return StateError{kind, std::move(message), rank, index};
  }
  static StateError not_initialized(Rank rank) {
    return error(StateErrc::not_initialized, "Rank " + std::to_string(rank) + " not initialized", rank);
  }

  ModelResult<bool> initialize(Rank rank, std::int64_t n, Role role) {
    if (role == Role::scheduler) return false;
    if (n <= 0) return error(StateErrc::invalid_initialization, "Invalid initialization parameters", rank);
    if (n > max_pages) {
      return error(StateErrc::invalid_initialization,
                   "Invalid initialization parameters: num_pages " + std::to_string(n) + " is above the maximum " +
                       std::to_string(max_pages),
                   rank);
    }
    if (ranks.count(rank)) return false;
    ModelRank r;
    r.num_pages = n;
    for (Page p = 0; p < n; ++p) r.pool.push_back(p);
    r.state.assign(n, PageState::free);
    r.owner.assign(n, "");
    r.allocated_for.assign(n, "");
    r.since.assign(n, 0);
    r.since_seq.assign(n, 0);
    r.after_reclaim.assign(n, false);
    ranks[rank] = r;
    return true;
  }

  std::optional<Page> complete_page(const std::string& key, Rank rank) const {
    auto it = keys.find(key);
    if (it == keys.end() || static_cast<std::int64_t>(it->second.pages.size()) != it->second.tp) return {};
    auto p = it->second.pages.find(rank);
    if (p == it->second.pages.end()) return {};
    return p->second;
  }

  ModelResult<std::vector<Page>> allocate(Rank rank, const std::vector<BlockKey>& batch) {
    if (!ranks.count(rank)) return not_initialized(rank);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      for (std::size_t j = 0; j < i; ++j) {
        if (batch[i].key == batch[j].key) {
          return error(StateErrc::invalid_argument,
                       "keys[" + std::to_string(i) + "]: duplicate key '" + batch[i].key + "' (also keys[" +
                           std::to_string(j) + "])",
                       rank, i);
        }
      }
    }
    if (life.on()) {
      for (const auto& k : batch) {
        if (complete_page(k.key, rank)) use(keys[k.key], true);
      }
      while (life.lru && ranks[rank].pool.size() < batch.size()) {
        const auto v = victim(rank, batch);
        if (!v) break;
        ++counters.evicted;
        remove(*v);
      }
    }
    ModelRank& r = ranks[rank];
    std::vector<Page> result;
    if (r.pool.size() < batch.size()) {
      for (const auto& k : batch) result.push_back(complete_page(k.key, rank).value_or(kNoPage));
      return result;
    }
    for (const auto& k : batch) {
      const Page p = r.pool.front();
      r.pool.pop_front();
      if (auto existing = complete_page(k.key, rank)) {
        r.pool.push_back(p);
        result.push_back(*existing);
      } else {
        r.state[p] = PageState::allocated;
        r.allocated_for[p] = k.key;
        timed(rank, p);
        result.push_back(p);
      }
    }
    return result;
  }

  using Release = std::pair<std::optional<std::string>, Page>;  // keyed, or bare
  ModelResult<ConfirmOutcome> confirm(Rank rank, const std::vector<Confirmation>& cs, const std::vector<Release>& rel) {
    if (cs.empty() && rel.empty()) return ConfirmOutcome{};
    if (!ranks.count(rank)) return not_initialized(rank);
    Model next = *this;
    ModelRank& r = next.ranks[rank];
    const std::string range = " is outside 0.." + std::to_string(r.num_pages - 1) + " on rank " + std::to_string(rank);
    ConfirmOutcome out;
    for (std::size_t i = 0; i < cs.size(); ++i) {
      const auto& [key, p] = cs[i];
      if (p < 0 || p >= r.num_pages) {
        return error(StateErrc::invalid_argument,
                     "confirmations[" + std::to_string(i) + "]: page " + std::to_string(p) + range, rank, i);
      }
      if (r.is_free(p)) {
        return error(StateErrc::stale,
                     "page " + std::to_string(p) + " of key " + key + " is not allocated on rank " +
                         std::to_string(rank),
                     rank, i);
      }
      if (r.state[p] == PageState::allocated && r.allocated_for[p] != key) {
        return error(StateErrc::conflict,
                     "page " + std::to_string(p) + " of key " + key + " was allocated for another key on rank " +
                         std::to_string(rank),
                     rank, i);
      }
      if (r.state[p] == PageState::draining) {
        return error(StateErrc::conflict,
                     "page " + std::to_string(p) + " of key " + key + " is draining on rank " + std::to_string(rank),
                     rank, i);
      }
      if (r.state[p] == PageState::mapped && r.owner[p] != key) {
        return error(StateErrc::conflict,
                     "page " + std::to_string(p) + " of key " + key + " is mapped to key " + r.owner[p] + " on rank " +
                         std::to_string(rank),
                     rank, i);
      }
      if (!next.keys.count(key)) {
        ModelKey& created = next.keys[key];
        created.tp = static_cast<std::int64_t>(next.ranks.size());
        created.incomplete_since = now;
        created.incomplete_seq = ++next.seq;
      }
      ModelKey& k = next.keys[key];
      if (k.pages.count(rank) && k.pages[rank] != p) {
        r.state[k.pages[rank]] = PageState::orphaned;
        r.owner[k.pages[rank]] = "";
        next.timed(rank, k.pages[rank]);
        if (k.lease_end) {  // a reader may be reading the old page: it drains
          ModelKey drain;
          drain.pages[rank] = k.pages[rank];
          drain.lease_end = k.lease_end;
          drain.lease_seq = k.lease_seq;
          // After the key's own lease event, the newest first among those of one lease.
          drain.order = std::numeric_limits<std::int32_t>::max() - ++next.orphans_drained;
          r.state[k.pages[rank]] = PageState::draining;
          next.draining.push_back(drain);
        }
      }
      const bool was_complete = k.complete();
      k.pages[rank] = p;
      if (!was_complete && k.complete()) next.use(k, false);
      if (was_complete && !k.complete()) {
        k.incomplete_since = now;
        k.incomplete_seq = ++next.seq;
      }
      r.state[p] = PageState::mapped;
      r.owner[p] = key;
      r.after_reclaim[p] = false;
      ++out.confirmed;
    }
    for (std::size_t j = 0; j < rel.size(); ++j) {  // every page in range first, then the reclaim rule
      const Page p = rel[j].second;
      if (p < 0 || p >= r.num_pages) {
        return error(StateErrc::invalid_argument,
                     "pages_to_release[" + std::to_string(j) + "]: page " + std::to_string(p) + range, rank, j);
      }
    }
    for (std::size_t j = 0; j < rel.size(); ++j) {
      const auto& [keyed, p] = rel[j];
      const std::string at = "pages_to_release[" + std::to_string(j) + "]: page " + std::to_string(p);
      if (!keyed && !r.is_free(p) && r.state[p] == PageState::allocated && r.after_reclaim[p]) {
        return error(StateErrc::conflict,
                     at + " was reclaimed by the allocation TTL and allocated again since on rank " +
                         std::to_string(rank) +
                         ": a bare release cannot be told from the late release of the writer whose allocation was "
                         "reclaimed (release it as [key, page])",
                     rank, j);
      }
    }
    for (const auto& [keyed, p] : rel) {
      if (!r.is_free(p) && (r.state[p] == PageState::mapped || r.state[p] == PageState::draining)) {
        ++out.kept_mapped;
        ++r.kept;
        continue;
      }
      if (keyed) {
        if (r.is_free(p) || r.state[p] != PageState::allocated || r.allocated_for[p] != *keyed) {
          ++out.late;
          continue;
        }
      } else if (r.is_free(p)) {
        continue;
      }
      r.state[p] = PageState::free;
      r.after_reclaim[p] = false;
      r.pool.push_back(p);
      ++out.released;
    }
    *this = std::move(next);
    return out;
  }

  std::vector<bool> exists(const std::vector<std::string>& ks) {
    std::vector<bool> result;
    for (const auto& k : ks) {
      auto it = keys.find(k);
      result.push_back(it != keys.end() && static_cast<std::int64_t>(it->second.pages.size()) == it->second.tp);
      if (result.back() && life.on()) use(it->second, true);
    }
    return result;
  }

  ModelResult<std::vector<std::optional<Page>>> locations(Rank rank, const std::vector<std::string>& ks) {
    if (!ranks.count(rank)) return not_initialized(rank);
    std::vector<std::optional<Page>> result;
    for (const auto& k : ks) {
      result.push_back(complete_page(k, rank));
      if (result.back() && life.on()) use(keys[k], true);
    }
    return result;
  }

  Snapshot snapshot(const std::vector<std::string>& universe) const {
    Snapshot s;
    for (const auto& [rank, r] : ranks) {
      testing::RankView view;
      view.rank = rank;
      view.pool.assign(r.pool.begin(), r.pool.end());
      view.stats.num_pages = r.num_pages;
      view.stats.kept_on_release = r.kept;
      for (Page p = 0; p < r.num_pages; ++p) {
        const PageState st = r.is_free(p) ? PageState::free : r.state[p];
        view.pages.push_back({st, st == PageState::mapped ? std::optional<std::string>(r.owner[p]) : std::nullopt});
        (st == PageState::free        ? view.stats.free
         : st == PageState::allocated ? view.stats.allocated
         : st == PageState::mapped    ? view.stats.mapped
         : st == PageState::orphaned  ? view.stats.orphaned
                                      : view.stats.draining) += 1;
      }
      s.ranks.push_back(view);
    }
    for (const auto& key : universe) {
      auto it = keys.find(key);
      if (it == keys.end()) {
        s.keys.emplace_back(key, std::nullopt);
        continue;
      }
      KeyInfo info{it->second.tp, {}, static_cast<std::int64_t>(it->second.pages.size()) == it->second.tp};
      for (const auto& [rank, page] : it->second.pages) info.pages.emplace_back(rank, page);
      s.keys.emplace_back(key, info);
    }
    s.key_count = keys.size();
    s.rank_count = ranks.size();
    return s;
  }
};

bool same_error(const StateError& a, const StateError& b) {
  return a.kind == b.kind && a.message == b.message && a.rank == b.rank && a.index == b.index;
}

template <class T, class U>
::testing::AssertionResult same(const StateResult<T>& got, const ModelResult<U>& want) {
  if (const auto* e = std::get_if<StateError>(&want)) {
    if (!got.has_error()) return ::testing::AssertionFailure() << "expected error: " << e->message;
    if (!same_error(got.error(), *e)) {
      return ::testing::AssertionFailure() << "error " << got.error().message << " (kind "
                                           << static_cast<int>(got.error().kind) << "), expected " << e->message;
    }
    return ::testing::AssertionSuccess();
  }
  if (got.has_error()) return ::testing::AssertionFailure() << "unexpected error: " << got.error().message;
  return ::testing::AssertionSuccess();
}

class Driver {
 public:
  explicit Driver(unsigned seed, Lifecycle life = {}) : rng_(seed), state_(options(life, clock_)) {
    for (const char* name : kNamespaces) {
      World& w = worlds_[name];
      w.model.max_pages = 16;
      w.model.life = life;
    }
    worlds_[""].exists = true;
    // Appended rather than "k" + to_string(i), which trips a false -Wrestrict in GCC 12.
    for (int i = 0; i < 12; ++i) universe_.push_back(std::string("k").append(std::to_string(i)));
    universe_.push_back("");
  }

  void run(int steps) {
    const Lifecycle life = model().life;
    for (step_ = 0; step_ < steps; ++step_) {
      // The clock moves every third step: each of the three namespaces gets about as many steps per
      // lease and TTL as the one namespace of a run without them had (or few keys complete in time).
      if (life.on() && step_ % 3 == 0) {
        // Mostly small steps, sometimes past every lease and TTL.
        *clock_ += std::chrono::milliseconds(pick(0, 9) == 0 ? pick(0, static_cast<int>(2 * std::max(life.lease, life.ttl)))
                                                             : pick(0, 3));
        for (auto& [name, w] : worlds_) w.model.advance(clock_->count());
      }
      ns_ = kNamespaces[pick(0, 2)];
      const int op = pick(0, life.on() ? 104 : 99);
      if (op >= 100) {
        do_delete();
      } else if (op < 6) {
        do_initialize();
      } else if (op < 40) {
        do_allocate();
      } else if (op < 80) {
        do_confirm();
      } else if (op < 89) {
        do_exists();
      } else if (op < 99) {
        do_locations();
      } else if (pick(0, 3) == 0) {
        state_.clear(ns());
        model().clear();
        world().leased.clear();
        world().history.clear();
      } else if (!ns_.empty() && pick(0, 5) == 0) {
        do_drop();
      }
      check_worlds();
      if (::testing::Test::HasFailure()) return;
    }
  }

 private:
  static StateOptions options(const Lifecycle& life, const std::shared_ptr<std::chrono::milliseconds>& clock) {
    StateOptions o{16};
    o.eviction = life.lru ? Eviction::lru : Eviction::none;
    o.read_lease = std::chrono::milliseconds(life.lease);
    o.allocation_ttl = std::chrono::milliseconds(life.ttl);
    o.clock = [clock] { return *clock; };
    return o;
  }

  static ::testing::AssertionResult same_stats(const StateStats& got, const StateStats& want) {
    auto fail = [](const char* what, auto a, auto b) {
      return ::testing::AssertionFailure() << what << ": " << a << ", model " << b;
    };
    if (got.ranks.size() != want.ranks.size()) return fail("ranks", got.ranks.size(), want.ranks.size());
    for (std::size_t i = 0; i < got.ranks.size(); ++i) {
      const RankStats& a = got.ranks[i].second;
      const RankStats& b = want.ranks[i].second;
      if (a.draining != b.draining) return fail("draining", a.draining, b.draining);
      if (a.free + a.allocated + a.mapped + a.orphaned + a.draining != a.num_pages) {
        return fail("pages that add up", a.free + a.allocated + a.mapped + a.orphaned + a.draining, a.num_pages);
      }
    }
    if (got.keys_complete != want.keys_complete) return fail("complete", got.keys_complete, want.keys_complete);
    if (got.keys_incomplete != want.keys_incomplete) return fail("incomplete", got.keys_incomplete, want.keys_incomplete);
    if (got.keys_leased != want.keys_leased) return fail("leased", got.keys_leased, want.keys_leased);
    if (got.evicted_keys != want.evicted_keys) return fail("evicted", got.evicted_keys, want.evicted_keys);
    if (got.deleted_keys != want.deleted_keys) return fail("deleted", got.deleted_keys, want.deleted_keys);
    if (got.reclaimed_keys != want.reclaimed_keys) return fail("reclaimed keys", got.reclaimed_keys, want.reclaimed_keys);
    if (got.reclaimed_allocated_pages != want.reclaimed_allocated_pages) {
      return fail("reclaimed allocated", got.reclaimed_allocated_pages, want.reclaimed_allocated_pages)
             << " (orphaned " << got.reclaimed_orphaned_pages << ", model " << want.reclaimed_orphaned_pages << ")";
    }
    if (got.reclaimed_orphaned_pages != want.reclaimed_orphaned_pages) {
      return fail("reclaimed orphaned", got.reclaimed_orphaned_pages, want.reclaimed_orphaned_pages);
    }
    return ::testing::AssertionSuccess();
  }

  // Every namespace, not only the step's: nothing it did may show in another.
  void check_worlds() {
    std::vector<std::string> live;
    for (const auto& [name, w] : worlds_) {
      if (w.exists) live.push_back(name.empty() ? std::string(kDefaultNamespace) : name);
    }
    std::sort(live.begin(), live.end());
    std::vector<std::string> got;
    for (const NamespaceSummary& summary : state_.namespaces()) got.push_back(summary.name);
    ASSERT_EQ(got, live) << "step " << step_;
    const std::string step_ns = ns_;
    for (const char* name : kNamespaces) {
      ns_ = name;
      SCOPED_TRACE(std::string("namespace '") + name + "'");
      ASSERT_EQ(testing::namespace_snapshot(state_, universe_, ns()), model().snapshot(universe_)) << "step " << step_;
      check_one_page_one_key();
      if (model().life.on()) {
        ASSERT_TRUE(same_stats(state_.stats(ns()), model().stats())) << "step " << step_;
      }
      if (::testing::Test::HasFailure()) return;
    }
    ns_ = step_ns;
  }

  // A named namespace goes with everything in it; one of that name made later starts empty.
  void do_drop() {
    World& w = world();
    NamespaceDropOutcome want{w.exists, 0, 0, 0};
    if (w.exists) {
      want.ranks = w.model.ranks.size();
      for (const auto& [rank, r] : w.model.ranks) want.pages += r.num_pages;
      want.keys_removed = w.model.keys.size();
    }
    add_stats(dropped_stats_, state_.stats(ns()));
    const auto got = state_.drop_namespace(ns_);
    ASSERT_TRUE(got.has_value()) << got.error().message;
    EXPECT_EQ(got.value(), want) << "step " << step_;
    World fresh;
    fresh.model.max_pages = w.model.max_pages;
    fresh.model.life = w.model.life;
    fresh.model.now = w.model.now;
    orphans_dropped_ += w.model.orphans_drained;
    w = std::move(fresh);
    ++drops_;
  }

  void do_delete() {
    std::vector<std::string> ks;
    for (int i = pick(0, 3); i > 0; --i) ks.push_back(key());
    EXPECT_EQ(state_.delete_keys(ns(), ks), model().delete_keys(ks)) << "step " << step_;
  }

  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  // With the lifecycle on, fewer ranks: more keys complete, so more of them to use, lease and evict.
  Rank rank() {
    if (model().life.on()) return pick(0, 9) == 0 ? -1 : pick(0, 1);
    return pick(-1, 3);
  }
  const std::string& key() { return universe_[pick(0, static_cast<int>(universe_.size()) - 1)]; }

  // Mostly pages that can be confirmed or released, sometimes anything, sometimes out of range.
  Page page(Rank r) {
    auto it = model().ranks.find(r);
    const std::int64_t n = it == model().ranks.end() ? 4 : it->second.num_pages;
    if (it != model().ranks.end() && pick(0, 9) < 6) {
      std::vector<Page> taken;
      for (Page p = 0; p < n; ++p) {
        if (!it->second.is_free(p)) taken.push_back(p);
      }
      if (!taken.empty()) return taken[pick(0, static_cast<int>(taken.size()) - 1)];
    }
    if (pick(0, 19) == 0) return pick(0, 1) ? Page{-1 - pick(0, 3)} : Page{n + pick(0, 3)};
    return pick(0, static_cast<int>(n) - 1);
  }

  void do_initialize() {
    const Rank r = rank();
    const Role role = pick(0, 9) == 0 ? Role::scheduler : Role::worker;
    const std::int64_t n = pick(0, 19) == 0 ? pick(-2, 0) : pick(0, 9) == 0 ? 17 : pick(1, 10);
    const auto got = state_.initialize(ns(), r, n, role);
    const auto want = model().initialize(r, n, role);
    ASSERT_TRUE(same(got, want)) << "step " << step_;
    count(got);
    if (got.has_value()) {
      EXPECT_EQ(got.value().created, std::get<bool>(want));
      if (got.value().created) world().exists = true;
    }
  }

  void do_allocate() {
    const Rank r = rank();
    std::vector<BlockKey> batch;
    const int n = pick(0, 5);
    for (int i = 0; i < n; ++i) {
      std::string k = key();
      // Mostly distinct keys, so that most batches get past the duplicate check.
      if (pick(0, 9) != 0) {
        while (std::any_of(batch.begin(), batch.end(), [&](const BlockKey& b) { return b.key == k; })) k = key();
      }
      batch.push_back(BlockKey{k, ""});
    }
    const auto got = state_.allocate(ns(), r, batch);
    const auto want = model().allocate(r, batch);
    ASSERT_TRUE(same(got, want)) << "step " << step_;
    count(got);
    if (!got.has_value()) return;
    EXPECT_EQ(got.value(), std::get<std::vector<Page>>(want)) << "step " << step_;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const Page p = got.value()[i];
      if (p == kNoPage) continue;
      if (state_.page_state(ns(), r, p) == PageState::allocated) {
        // Handed out to be written: no reader may hold a lease on it.
        const auto it = world().leased.find({r, p});
        EXPECT_TRUE(it == world().leased.end() || it->second.second <= model().now)
            << "step " << step_ << ": leased page " << p << " of rank " << r << " allocated to " << batch[i].key;
        world().history.emplace_back(r, batch[i].key, p);
      } else {
        read(r, p, batch[i].key);  // a complete key's page, reused: leased
      }
    }
    if (world().history.size() > 64) world().history.erase(world().history.begin(), world().history.begin() + 32);
  }

  void do_confirm() {
    // Mostly a rank that exists, so that the confirmations are judged.
    Rank r = rank();
    if (!model().ranks.empty() && pick(0, 9) != 0) {
      auto it = model().ranks.begin();
      std::advance(it, pick(0, static_cast<int>(model().ranks.size()) - 1));
      r = it->first;
    }
    std::vector<Confirmation> cs;
    std::vector<Page> rel;
    const int nc = pick(0, 4);
    for (int i = 0; i < nc; ++i) {
      const Page p = page(r);
      // Often the key that maps the page already, or that it was allocated for: always accepted.
      std::string k = key();
      auto it = model().ranks.find(r);
      if (pick(0, 2) != 0 && it != model().ranks.end() && p >= 0 && p < it->second.num_pages &&
          !it->second.is_free(p)) {
        if (it->second.state[p] == PageState::mapped) k = it->second.owner[p];
        if (it->second.state[p] == PageState::allocated) k = it->second.allocated_for[p];
      }
      cs.push_back({k, p});
    }
    // Sometimes a leased key onto an orphaned page: its page moves while a reader may read it.
    if (auto it = model().ranks.find(r); it != model().ranks.end() && pick(0, 1) == 0) {
      std::vector<Page> orphans;
      for (Page p = 0; p < it->second.num_pages; ++p) {
        if (!it->second.is_free(p) && it->second.state[p] == PageState::orphaned) orphans.push_back(p);
      }
      std::vector<std::string> leased;
      for (const auto& [name, k] : model().keys) {
        if (k.lease_end && k.pages.count(r)) leased.push_back(name);
      }
      if (!orphans.empty() && !leased.empty()) {
        cs.clear();  // alone, so that no other confirmation of the batch gets it refused
        cs.push_back({leased[pick(0, static_cast<int>(leased.size()) - 1)],
                      orphans[pick(0, static_cast<int>(orphans.size()) - 1)]});
      }
    }
    std::vector<Model::Release> releases;
    const int nr = pick(0, 3);
    for (int i = 0; i < nr; ++i) releases.push_back(release(r));
    std::vector<ReleaseKey> keyed;
    for (std::size_t j = 0; j < releases.size(); ++j) {
      rel.push_back(releases[j].second);
      if (releases[j].first) keyed.push_back(ReleaseKey{j, *releases[j].first});
    }
    const auto got = state_.confirm_write(ns(), r, cs, rel, keyed);
    const auto want = model().confirm(r, cs, releases);
    ASSERT_TRUE(same(got, want)) << "step " << step_;
    count(got);
    if (got.has_value()) {
      const auto& w = std::get<ConfirmOutcome>(want);
      EXPECT_EQ(got.value().confirmed, w.confirmed);
      EXPECT_EQ(got.value().released, w.released);
      EXPECT_EQ(got.value().kept_mapped, w.kept_mapped);
      EXPECT_EQ(got.value().late, w.late);
      late_ += w.late;
    } else if (got.error().message.find("reclaimed by the allocation TTL") != std::string::npos) {
      ++bare_after_reclaim_;
    }
    ++(got.has_value() ? accepted_ : refused_);
  }

  template <class T>
  void count(const StateResult<T>& result) {
    if (result.has_error()) ++refusals_[static_cast<int>(result.error().kind)];
  }

  void do_exists() {
    std::vector<std::string> ks;
    for (int i = pick(0, 6); i > 0; --i) ks.push_back(key());
    EXPECT_EQ(state_.batch_exists(ns(), ks), model().exists(ks)) << "step " << step_;
  }

  void do_locations() {
    const Rank r = rank();
    std::vector<std::string> ks;
    for (int i = pick(0, 6); i > 0; --i) ks.push_back(key());
    const auto got = state_.get_locations(ns(), r, ks);
    const auto want = model().locations(r, ks);
    ASSERT_TRUE(same(got, want)) << "step " << step_;
    if (!got.has_value()) return;
    EXPECT_EQ(got.value(), (std::get<std::vector<std::optional<Page>>>(want)));
    for (std::size_t i = 0; i < ks.size(); ++i) {
      if (got.value()[i]) read(r, *got.value()[i], ks[i]);
    }
  }

  // A release: mostly of a page in use (bare, or keyed with the key it was allocated for), sometimes
  // a late one, of a page once allocated to some key (which the TTL may have reclaimed and handed
  // to another key since), bare or keyed.
  Model::Release release(Rank r) {
    const int kind = pick(0, 9);
    std::vector<const std::tuple<Rank, std::string, Page>*> mine;
    for (const auto& h : world().history) {
      if (std::get<0>(h) == r) mine.push_back(&h);
    }
    if (kind >= 6 && !mine.empty()) {
      const auto& [rank, key, p] = *mine[pick(0, static_cast<int>(mine.size()) - 1)];
      return {kind >= 8 ? std::optional<std::string>(key) : std::nullopt, p};
    }
    const Page p = page(r);
    auto it = model().ranks.find(r);
    if (kind >= 4 && it != model().ranks.end() && p >= 0 && p < it->second.num_pages && !it->second.is_free(p)) {
      return {it->second.state[p] == PageState::allocated ? it->second.allocated_for[p] : key(), p};
    }
    return {std::nullopt, p};
  }

  // A reader was told the key's page: with leases on, it may read it until its lease ends.
  void read(Rank r, Page p, const std::string& key) {
    if (model().life.lease == 0) return;
    auto& [holder, end] = world().leased[{r, p}];
    if (holder != key) end = 0;
    holder = key;
    end = std::max(end, model().now + model().life.lease);
  }

  // No page is mapped to two keys (each key's page is that page's owner), and every page a reader
  // may still be reading is still its key's or draining: never free, allocated or another key's.
  void check_one_page_one_key() {
    std::map<std::pair<Rank, Page>, std::string> mapped;
    for (const auto& key : universe_) {
      const auto info = state_.key_info(ns(), key);
      if (!info) continue;
      for (const auto& [rank, p] : info->pages) {
        const auto [it, inserted] = mapped.emplace(std::pair{rank, p}, key);
        EXPECT_TRUE(inserted) << "step " << step_ << ": page " << p << " of rank " << rank << " mapped to " << key
                              << " and " << it->second;
        EXPECT_EQ(state_.page_owner(ns(), rank, p), key) << "step " << step_;
      }
    }
    for (auto it = world().leased.begin(); it != world().leased.end();) {
      const auto& [where, lease] = *it;
      if (lease.second <= model().now) {
        it = world().leased.erase(it);
        continue;
      }
      const auto st = state_.page_state(ns(), where.first, where.second);
      const bool kept = st == PageState::draining ||
                        (st == PageState::mapped && state_.page_owner(ns(), where.first, where.second) == lease.first);
      EXPECT_TRUE(kept) << "step " << step_ << ": page " << where.second << " of rank " << where.first
                        << ", read as key " << lease.first << " until " << lease.second << ", is "
                        << (st ? static_cast<int>(*st) : -1) << " at " << model().now;
      ++it;
    }
  }

 public:
  // Summed over the namespaces, those dropped included.
  StateStats stats() const {
    StateStats total = dropped_stats_;
    for (const auto& [name, st] : state_.all_stats()) add_stats(total, st);
    return total;
  }
  static void add_stats(StateStats& total, const StateStats& st) {
    total.evicted_keys += st.evicted_keys;
    total.deleted_keys += st.deleted_keys;
    total.reclaimed_keys += st.reclaimed_keys;
    total.reclaimed_allocated_pages += st.reclaimed_allocated_pages;
    total.reclaimed_orphaned_pages += st.reclaimed_orphaned_pages;
  }
  int drops_ = 0;  // named namespaces dropped (existing or not)
  int accepted_ = 0;
  int refused_ = 0;
  std::size_t late_ = 0;  // keyed releases that came late
  int bare_after_reclaim_ = 0;  // bare releases refused: the page was reclaimed and allocated again
  std::int64_t orphans_drained() const {
    std::int64_t total = orphans_dropped_;  // of namespaces dropped since
    for (const auto& [name, w] : worlds_) total += w.model.orphans_drained;
    return total;
  }
  std::map<int, int> refusals_;  // by StateErrc

 private:
  std::mt19937 rng_;
  std::shared_ptr<std::chrono::milliseconds> clock_ = std::make_shared<std::chrono::milliseconds>(0);
  MetadataState state_;
  Model model_;
  std::vector<std::string> universe_;
  int step_ = 0;
  // One namespace: its model and what its readers and writers were told.
  struct World {
    Model model;
    bool exists = false;  // a named namespace: made by a worker's initialize, gone at its drop
    std::vector<std::tuple<Rank, std::string, Page>> history;  // pages handed out by allocate, and to which key
    std::map<std::pair<Rank, Page>, std::pair<std::string, std::int64_t>> leased;  // read as key, until
  };
  static constexpr const char* kNamespaces[] = {"", "a", "b"};  // the default one and two named
  std::map<std::string, World> worlds_;
  std::string ns_;  // the namespace of the step
  std::int64_t orphans_dropped_ = 0;
  StateStats dropped_stats_;  // the counters of namespaces dropped since
  World& world() { return worlds_[ns_]; }
  Model& model() { return world().model; }
  NamespaceRef ns() const { return NamespaceRef{ns_}; }
};

// HF3FS_META_PROPERTY_SEEDS=N runs seeds 1..N instead of 1..8 (a longer soak, by hand).
TEST(StateProperty, AgreesWithTheModel) {
  const char* seeds_env = std::getenv("HF3FS_META_PROPERTY_SEEDS");
  const unsigned seeds = seeds_env ? static_cast<unsigned>(std::strtoul(seeds_env, nullptr, 10)) : 8u;
  std::map<int, int> refusals;
  for (unsigned seed = 1; seed <= seeds; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Driver driver(seed);
    driver.run(3000);
    if (HasFailure()) return;
    // The mix must exercise both sides of confirm_write, or the comparison proves little.
    EXPECT_GT(driver.accepted_, 200);
    EXPECT_GT(driver.refused_, 200);
    for (const auto& [kind, n] : driver.refusals_) refusals[kind] += n;
  }
  // Every kind of refusal came up, each compared with the model's.
  for (StateErrc kind : {StateErrc::invalid_argument, StateErrc::invalid_initialization, StateErrc::not_initialized,
                         StateErrc::stale, StateErrc::conflict}) {
    EXPECT_GT(refusals[static_cast<int>(kind)], 20) << "kind " << static_cast<int>(kind);
  }
}

// The same with the cache lifecycle on, in each combination that changes what is observable.
TEST(StateProperty, AgreesWithTheModelWithEvictionLeasesAndReclaim) {
  const char* seeds_env = std::getenv("HF3FS_META_PROPERTY_SEEDS");
  const unsigned seeds = seeds_env ? static_cast<unsigned>(std::strtoul(seeds_env, nullptr, 10)) : 6u;
  // The last: long leases, so that keys are often leased when their page moves.
  const Lifecycle configs[] = {{true, 0, 0}, {true, 20, 0}, {false, 20, 40}, {true, 20, 40}, {true, 0, 15}, {false, 300, 0}};
  std::int64_t all_orphans_drained = 0;
  for (const Lifecycle& life : configs) {
    const std::string config = "lru " + std::to_string(life.lru) + " lease " + std::to_string(life.lease) + " ttl " +
                               std::to_string(life.ttl);
    StateStats total;
    std::size_t late = 0;
    int bare_after_reclaim = 0;
    std::int64_t orphans_drained = 0;
    for (unsigned seed = 1; seed <= seeds; ++seed) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " " + config);
      Driver driver(seed, life);
      driver.run(4500);  // three namespaces share the steps: each part of the lifecycle must still come up
      if (HasFailure()) return;
      EXPECT_GT(driver.accepted_, 200);
      late += driver.late_;
      bare_after_reclaim += driver.bare_after_reclaim_;
      orphans_drained += driver.orphans_drained();
      const StateStats st = driver.stats();
      total.evicted_keys += st.evicted_keys;
      total.deleted_keys += st.deleted_keys;
      total.reclaimed_keys += st.reclaimed_keys;
      total.reclaimed_allocated_pages += st.reclaimed_allocated_pages;
      total.reclaimed_orphaned_pages += st.reclaimed_orphaned_pages;
    }
    // Each switched-on part of the lifecycle came up often enough for the comparison to mean something.
    SCOPED_TRACE(config);
    EXPECT_GT(total.deleted_keys, 20u);
    EXPECT_TRUE(!life.lru || total.evicted_keys > 20u) << total.evicted_keys;
    EXPECT_TRUE(life.ttl == 0 || (total.reclaimed_keys > 20u && total.reclaimed_allocated_pages > 20u &&
                                  total.reclaimed_orphaned_pages > 0u))
        << total.reclaimed_keys << " " << total.reclaimed_allocated_pages << " " << total.reclaimed_orphaned_pages;
    // Late releases, bare ones refused after a reclaim, and pages orphaned under a lease came up.
    EXPECT_GT(late, 20u);
    EXPECT_TRUE(life.ttl == 0 || bare_after_reclaim > 20) << bare_after_reclaim;
    all_orphans_drained += orphans_drained;
  }
  // Rarer (each takes an orphan, and the key must be leased): counted over the configurations.
  EXPECT_GT(all_orphans_drained, 20);
}

}  // namespace
}  // namespace hf3fs_meta
