// hf3fs-meta-server: the reference metadata server of vLLM's HF3FS KV-cache connector.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/signal_set.hpp>

#include "durable/data_dir.hpp"
#include "durable/store.hpp"
#include "ha/member.hpp"
#include "ha/verify_log.hpp"
#include "hf3fs_meta/protocol.hpp"
#include "hf3fs_meta/service.hpp"
#include "hf3fs_meta/state.hpp"
#include "metrics.hpp"
#include "router.hpp"
#include "server.hpp"
#include "server_options.hpp"
#include "service_notify.hpp"
#include "tenants.hpp"

namespace {

std::string url_host(const std::string& host) {
  return host.find(':') != std::string::npos ? "[" + host + "]" : host;
}

// Said after the counts of a state with named namespaces (the counts are of all of them).
std::string in_namespaces(std::size_t count) {
  return count > 1 ? " in " + std::to_string(count) + " namespaces" : std::string();
}

// --verify-data-dir: recovery without the lock and without writing anything, under the limits the
// server would have with the same --max-* flags.
int verify(const std::string& dir, const hf3fs_meta::StateOptions& limits) {
  using namespace hf3fs_meta;
  MetadataState state(limits);
  const auto start = std::chrono::steady_clock::now();
  auto recovered = durable::recover(dir, state);
  if (!recovered) {
    std::fprintf(stderr, "hf3fs-meta-server: %s\n", recovered.error().message.c_str());
    return 2;
  }
  const auto& r = recovered.value();
  RankStats total;  // of every namespace's ranks
  const auto spaces = state.all_stats();
  for (const auto& [name, space] : spaces) {
    for (const auto& [rank, stats] : space.ranks) {
      total.num_pages += stats.num_pages;
      total.free += stats.free;
      total.allocated += stats.allocated;
      total.mapped += stats.mapped;
      total.orphaned += stats.orphaned;
      total.draining += stats.draining;
    }
  }
  // "sound" only when the server would start from these files as they are.
  const std::string verdict = r.cut ? "cut " + std::to_string(r.cut_bytes) + " bytes after change " +
                                          std::to_string(r.seq) + " (the server will cut them)"
                                    : std::string("sound");
  std::printf("%s: %s. snapshot at change %llu, %zu journal records replayed (%llu bytes), last change %llu%s%s\n"
              "%zu ranks, %lld pages (%lld free, %lld allocated, %lld mapped, %lld orphaned, %lld draining), %zu keys%s, "
              "%zu request-id answers; read in %.0f ms\n",
              dir.c_str(), verdict.c_str(), static_cast<unsigned long long>(r.snapshot_seq), r.records,
              static_cast<unsigned long long>(r.journal_bytes), static_cast<unsigned long long>(r.seq),
              r.cut ? "; " : "", r.cut ? r.cut->c_str() : "", state.rank_count(),
              static_cast<long long>(total.num_pages), static_cast<long long>(total.free),
              static_cast<long long>(total.allocated), static_cast<long long>(total.mapped),
              static_cast<long long>(total.orphaned), static_cast<long long>(total.draining), state.key_count(),
              in_namespaces(spaces.size()).c_str(),
              r.dedup.size(),
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  return 0;
}

// --verify-ha-log: the cluster's replicated log read and checked (ha/verify_log.hpp).
int verify_ha_log(const hf3fs_meta::server::ServerOptions& options) {
  using namespace hf3fs_meta::server;
  ha::EtcdClient etcd(ha::EtcdOptions{.endpoints = options.ha_etcd});
  const auto verdict = ha::verify_log(etcd, ha::Keys(options.ha_cluster));
  if (!verdict) {
    std::fprintf(stderr, "hf3fs-meta-server: the log of cluster %s could not be read: %s\n",
                 options.ha_cluster.c_str(), verdict.error().message.c_str());
    return 2;
  }
  const ha::LogVerdict& v = verdict.value();
  std::printf("log of cluster %s: %s. %llu entries, records %llu-%llu (%llu bytes), read at revision %lld\n",
              options.ha_cluster.c_str(), v.problem.empty() ? "sound" : ("broken: " + v.problem).c_str(),
              static_cast<unsigned long long>(v.entries), static_cast<unsigned long long>(v.first_seq),
              static_cast<unsigned long long>(v.last_seq), static_cast<unsigned long long>(v.bytes),
              static_cast<long long>(v.revision));
  return v.problem.empty() ? 0 : 2;
}

// SIGHUP: --tenants-file read again; a file that does not parse keeps the table in use. Without
// tenants (null) there is nothing to reload and the signal is only logged: operators send SIGHUP to
// reload, and its default action would end a server whose memory may be all there is. Re-armed after
// each signal, until cancelled at shutdown.
void reload_on_hangup(boost::asio::signal_set& hangups, hf3fs_meta::server::Tenants* tenants,
                      const hf3fs_meta::server::ServerOptions& options) {
  hangups.async_wait([&hangups, tenants, &options](const boost::system::error_code& ec, int) {
    if (ec) return;
    if (!tenants) {
      std::fputs("hf3fs-meta-server: SIGHUP ignored: there is nothing to reload without --tenants-file\n", stderr);
      reload_on_hangup(hangups, tenants, options);
      return;
    }
    const auto kept = tenants->table()->tokens();
    const auto reloaded = tenants->reload(options.tenants_file, options.auth_token);
    if (reloaded.table) {
      std::fprintf(stderr, "hf3fs-meta-server: --tenants-file %s reloaded: %zu tokens (%zu operators)\n",
                   options.tenants_file.c_str(), reloaded.table->tokens(), reloaded.table->operators());
    } else {
      std::fprintf(stderr, "hf3fs-meta-server: %s; the previous %zu tokens stay\n", reloaded.error.c_str(), kept);
    }
    reload_on_hangup(hangups, tenants, options);
  });
}

}  // namespace

int main(int argc, char** argv) {
  using namespace hf3fs_meta;
  using namespace hf3fs_meta::server;

  auto parsed = parse_options(std::vector<std::string>(argv + 1, argv + argc));
  if (!parsed.options) {
    std::fputs(parsed.message.c_str(), parsed.exit_code == 0 ? stdout : stderr);
    return parsed.exit_code;
  }
  const ServerOptions options = *parsed.options;
  if (!options.verify_data_dir.empty()) return verify(options.verify_data_dir, state_options(options));
  if (options.verify_ha_log) return verify_ha_log(options);
  // A client that goes away must not kill the server; socket writes already avoid SIGPIPE, stdout not.
  std::signal(SIGPIPE, SIG_IGN);

  try {
    MetadataState state(state_options(options));
    // --ha-etcd: the member's journal appends to the replicated log (ha/member.hpp).
    std::unique_ptr<ha::Member> member;
    if (!options.ha_etcd.empty()) {
      member = std::make_unique<ha::Member>(
          ha::MemberOptions{.etcd = options.ha_etcd,
                            .cluster = options.ha_cluster,
                            .name = options.ha_name,
                            .advertise = options.ha_advertise,
                            .ttl_seconds = options.ha_lease.count(),
                            .snapshot_fetch = {.auth_token = options.auth_token}},
          state);
    }
    std::unique_ptr<durable::Store> store;
    if (!options.data_dir.empty()) {
      durable::Store::Options store_options{options.data_dir, options.fsync, options.snapshot_after_bytes,
                                            options.dedup_max_bytes};
      if (member) {
        // A data dir the compacted log no longer continues starts from the leader's snapshot.
        auto fetched = member->fetch_snapshot_if_behind(options.data_dir);
        if (!fetched) {
          std::fprintf(stderr, "hf3fs-meta-server: ha %s: %s\n", options.ha_name.c_str(), fetched.error().message.c_str());
        } else if (fetched.value() != 0) {
          std::fprintf(stderr, "hf3fs-meta-server: ha %s: the leader's snapshot of change %llu installed in %s\n",
                       options.ha_name.c_str(), static_cast<unsigned long long>(fetched.value()),
                       options.data_dir.c_str());
        }
        store_options.replicate = [m = member.get()](std::string_view records, std::uint64_t last_seq) {
          return m->replicate(records, last_seq);
        };
        store_options.replicate_in_flight = options.ha_appends_in_flight;
        store_options.replicate_gather = options.ha_batch_wait;
      }
      // A data dir that cannot be read exactly stops the server: never a silently partial state.
      auto opened = durable::Store::open(std::move(store_options), state);
      if (!opened) {
        std::fprintf(stderr, "hf3fs-meta-server: %s\n", opened.error().message.c_str());
        return 2;
      }
      store = std::move(opened).value();
      for (const auto& path : store->recovered().removed_temporaries) {
        std::fprintf(stderr, "hf3fs-meta-server: removed %s, left by an interrupted snapshot\n", path.c_str());
      }
      if (const auto& cut = store->recovered().cut) std::fprintf(stderr, "hf3fs-meta-server: %s\n", cut->c_str());
    }
    const unsigned threads = options.threads ? options.threads : std::max(1u, std::thread::hardware_concurrency());
    Metrics metrics(threads);
    Router router(options, state, metrics, store.get());
    if (member) router.set_role(&member->role());
    if (store) {
      const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::system_clock::now().time_since_epoch()).count();
      for (const auto& e : store->recovered().dedup) router.dedup().restore(e, now_ms);
      store->recovered().dedup.clear();
      std::fprintf(stderr, "hf3fs-meta-server: recovered %zu ranks, %zu keys%s from %s in %.0f ms\n",
                   state.rank_count(), state.key_count(), in_namespaces(state.namespaces().size()).c_str(),
                   options.data_dir.c_str(), store->stats().recovery_seconds * 1000);
    }
    // Options the server cannot serve with (a TLS file it cannot use, an address it cannot listen
    // on) stop it as a bad flag does: exit 2 with the reason.
    std::unique_ptr<Server> started;
    try {
      started = std::make_unique<Server>(options, router);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "hf3fs-meta-server: --tls-cert %s --tls-key %s: %s\n", options.tls_cert.c_str(),
                   options.tls_key.c_str(), e.what());
      return 2;
    }
    Server& server = *started;
    boost::asio::ip::tcp::endpoint endpoint;
    try {
      endpoint = server.listen();
    } catch (const boost::system::system_error& e) {
      std::fprintf(stderr, "hf3fs-meta-server: cannot listen on %s port %u: %s\n", url_host(options.host).c_str(),
                   static_cast<unsigned>(options.port), e.code().message().c_str());
      return 2;
    }
    const std::string address = url_host(options.host) + ":" + std::to_string(endpoint.port());
    router.set_default_host(address);

    boost::asio::io_context signal_context(1);
    boost::asio::signal_set signals(signal_context, SIGINT, SIGTERM);
    int caught = 0;
    signals.async_wait([&](const boost::system::error_code& ec, int signal) {
      if (ec) return;
      caught = signal;
      notify_service_manager("hf3fs-meta-server", "STOPPING=1");
      server.stop();
    });
    // SIGHUP reads --tenants-file again; without one it is logged and ignored.
    boost::asio::signal_set hangups(signal_context, SIGHUP);
    reload_on_hangup(hangups, router.tenants(), options);
    std::thread signal_thread([&] { signal_context.run(); });

    const char* scheme = options.tls_cert.empty() ? "http" : "https";
    std::string lifecycle;  // the cache lifecycle, as the state model took it
    if (state.options().eviction == Eviction::lru) lifecycle += ", eviction lru";
    if (const auto lease = state.options().read_lease.count(); lease > 0) {
      lifecycle += ", read lease " + std::to_string(lease) + " ms";
    }
    if (const auto ttl = state.options().allocation_ttl.count(); ttl > 0) {
      lifecycle += ", allocation ttl " + std::to_string(ttl) + " ms";
    }
    const std::string acknowledged = member ? std::string(", acknowledged once in the replicated log")
                                            : ", fsync " + std::string(durable::to_string(options.fsync));
    const std::string durability = store ? ", data dir " + options.data_dir + acknowledged : ", memory only";
    const std::string ha_note = member ? ", ha member " + options.ha_name + " of cluster " + options.ha_cluster +
                                             " (lease " + std::to_string(options.ha_lease.count()) + " s)"
                                       : std::string();
    const std::string tenants_note =
        router.tenants() ? ", tenants " + std::to_string(router.tenants()->table()->tokens())
                         : options.auth_token.empty() ? std::string() : std::string(", bearer token required");
    // "listening on URL" is said once, on stdout (the line scripts and tests read); stderr, often the
    // same log, gets the settings without repeating it.
    std::fprintf(stderr,
                 "hf3fs-meta-server: ready (threads %u, max pages %lld, max connections %zu%s%s%s%s%s)\n",
                 threads, static_cast<long long>(options.max_pages), server.max_connections(),
                 durability.c_str(), ha_note.c_str(),
                 tenants_note.c_str(),
                 options.enable_fault_injection ? ", fault injection on" : "", lifecycle.c_str());
    if (member) {
      member->start(*store,
                    [&router](std::vector<durable::DedupEntry>& answers) {
                      const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                              std::chrono::system_clock::now().time_since_epoch()).count();
                      for (const auto& e : answers) router.dedup().restore(e, now_ms);
                    },
                    options.ha_advertise.empty() ? std::string(scheme) + "://" + address : options.ha_advertise);
    }
    std::printf("listening on %s://%s\n", scheme, address.c_str());
    std::fflush(stdout);
    // Type=notify: ready once the data dir is recovered, the HA member started and the port listens,
    // the moment the listening line tells scripts the same.
    notify_service_manager("hf3fs-meta-server",
                           std::string("READY=1\nSTATUS=listening on ") + scheme + "://" + address);

    server.run();
    signals.cancel();
    hangups.cancel();
    signal_thread.join();
    // A leader resigns (another member takes over at once) before the shutdown snapshot.
    if (member) member->stop();
    if (store) {
      // Clean shutdown: a snapshot, so the next start reads one file and replays nothing.
      auto snapshot = store->shutdown();
      if (snapshot) {
        std::fprintf(stderr, "hf3fs-meta-server: snapshot of %llu bytes written to %s\n",
                     static_cast<unsigned long long>(snapshot.value()), options.data_dir.c_str());
      } else {
        std::fprintf(stderr, "hf3fs-meta-server: the shutdown snapshot failed (%s); the journal has every change\n",
                     snapshot.error().message.c_str());
      }
    }
    std::fprintf(stderr, "hf3fs-meta-server: stopped (%s), %llu requests served\n",
                 caught == SIGINT ? "SIGINT" : caught == SIGTERM ? "SIGTERM" : "no signal",
                 static_cast<unsigned long long>(server.requests_served()));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hf3fs-meta-server: %s\n", e.what());
    return 1;
  }
}
