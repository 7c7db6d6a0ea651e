// hf3fs_meta._core: the Python binding of Client (docs/design.md, "Python"). It shapes arguments and
// results and turns an Error into hf3fs_meta.MetadataError; every guarantee (validation of keys and
// pages, retries, re-initialization, thread safety) is the C++ Client's and is tested there. The
// GIL is released for every call into the Client, so one client serves many Python threads.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>  // std::optional arguments

#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hf3fs_meta/client.hpp"
#include "hf3fs_meta/protocol.hpp"
#include "hf3fs_meta/in_process_transport.hpp"

#include "internal/endpoint_url.hpp"
#include "internal/field_text.hpp"
#include "internal/namespace_name.hpp"
#include "internal/token_file.hpp"

namespace py = pybind11;
using namespace hf3fs_meta;

namespace {

// ---- arguments -------------------------------------------------------------------------------

// Where an argument sits, named as the SDK names refused items: "keys[3]", "keys[3][1]".
struct Where {
  const char* field;
  std::ptrdiff_t index = -1;
  std::ptrdiff_t part = -1;
  std::string text() const {
    std::string out = index < 0 ? std::string(field) : internal::indexed(field, static_cast<std::size_t>(index));
    return part < 0 ? out : internal::indexed(out, static_cast<std::size_t>(part));
  }
  Where at(std::size_t i) const { return Where{field, static_cast<std::ptrdiff_t>(i), -1}; }
  Where member(std::size_t p) const { return Where{field, index, static_cast<std::ptrdiff_t>(p)}; }
};

[[noreturn]] void type_error(const Where& where, py::handle got, std::string_view expected) {
  throw py::type_error(where.text() + ": expected " + std::string(expected) + ", got " + Py_TYPE(got.ptr())->tp_name);
}

std::int64_t as_int(py::handle h, const Where& where) {
  // bool is an int in Python; as a rank or a page it is a mistake (vLLM's server takes True as 1).
  if (!PyLong_Check(h.ptr()) || PyBool_Check(h.ptr())) type_error(where, h, "an int");
  int overflow = 0;
  const long long value = PyLong_AsLongLongAndOverflow(h.ptr(), &overflow);
  if (overflow != 0) throw py::value_error(where.text() + ": " + std::string(py::repr(h)) + " does not fit 64 bits");
  if (value == -1 && PyErr_Occurred()) throw py::error_already_set();
  return value;
}

std::string as_str(py::handle h, const Where& where) {
  if (!PyUnicode_Check(h.ptr())) type_error(where, h, "a str");
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(h.ptr(), &size);
  if (data == nullptr) throw py::error_already_set();  // a lone surrogate cannot be UTF-8
  return std::string(data, static_cast<std::size_t>(size));
}

// A list or a tuple, never a str (whose characters would each become a key).
py::handle sequence(py::handle h, const Where& where, std::string_view of) {
  if (!PyList_Check(h.ptr()) && !PyTuple_Check(h.ptr())) type_error(where, h, "a list or tuple of " + std::string(of));
  return h;
}
std::size_t length(py::handle seq) { return static_cast<std::size_t>(PySequence_Fast_GET_SIZE(seq.ptr())); }
py::handle item(py::handle seq, std::size_t i) {
  return PySequence_Fast_GET_ITEM(seq.ptr(), static_cast<Py_ssize_t>(i));
}

// A two-member list or tuple.
bool is_pair(py::handle h) { return (PyList_Check(h.ptr()) || PyTuple_Check(h.ptr())) && length(h) == 2; }

std::vector<std::string> strings(py::handle h, const char* field) {
  const Where where{field};
  const py::handle seq = sequence(h, where, "str");
  std::vector<std::string> out;
  out.reserve(length(seq));
  for (std::size_t i = 0; i < length(seq); ++i) out.push_back(as_str(item(seq, i), where.at(i)));
  return out;
}

// Block keys as vLLM passes them, (key, prefix_key) pairs, or plain str keys (an empty prefix key).
// `key_objects` keeps each key's str, so that answers hand back the caller's own objects.
std::vector<BlockKey> block_keys(py::handle h, std::vector<py::object>* key_objects) {
  const Where where{"keys"};
  const py::handle seq = sequence(h, where, "keys");
  const std::size_t n = length(seq);
  std::vector<BlockKey> out;
  out.reserve(n);
  if (key_objects != nullptr) key_objects->reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const py::handle k = item(seq, i);
    py::handle key;
    if (PyUnicode_Check(k.ptr())) {
      key = k;
      out.push_back(BlockKey{as_str(k, where.at(i)), {}});
    } else if (is_pair(k)) {
      key = item(k, 0);
      out.push_back(BlockKey{as_str(key, where.at(i).member(0)), as_str(item(k, 1), where.at(i).member(1))});
    } else {
      type_error(where.at(i), k, "a str or a (key, prefix_key) pair");
    }
    if (key_objects != nullptr) key_objects->push_back(py::reinterpret_borrow<py::object>(key));
  }
  return out;
}

std::vector<Confirmation> confirmations(py::handle h, const char* field) {
  const Where where{field};
  const py::handle seq = sequence(h, where, "(key, page) pairs");
  std::vector<Confirmation> out;
  out.reserve(length(seq));
  for (std::size_t i = 0; i < length(seq); ++i) {
    const py::handle c = item(seq, i);
    if (!is_pair(c)) type_error(where.at(i), c, "a (key, page) pair");
    out.push_back(Confirmation{as_str(item(c, 0), where.at(i).member(0)), as_int(item(c, 1), where.at(i).member(1))});
  }
  return out;
}

std::vector<Page> pages(py::handle h, const char* field) {
  std::vector<Page> out;
  if (h.is_none()) return out;
  const Where where{field};
  const py::handle seq = sequence(h, where, "int");
  out.reserve(length(seq));
  for (std::size_t i = 0; i < length(seq); ++i) out.push_back(as_int(item(seq, i), where.at(i)));
  return out;
}

Role role_of(py::handle h) {
  const std::string role = as_str(h, Where{"role"});
  if (role == to_string(Role::worker)) return Role::worker;
  if (role == to_string(Role::scheduler)) return Role::scheduler;
  throw py::value_error("role: expected 'worker' or 'scheduler', got " + internal::quoted(role));
}

// Seconds as the client takes them: positive, and no longer than it can measure (kMaxDuration, 100
// years), refused here rather than overflowing the conversion to milliseconds.
std::chrono::milliseconds milliseconds_of(double seconds, const char* field) {
  constexpr double kMaxSeconds = std::chrono::duration<double>(kMaxDuration).count();
  char given[32];
  std::snprintf(given, sizeof given, "%g", seconds);
  if (!std::isfinite(seconds) || seconds <= 0) {
    throw py::value_error(std::string(field) + ": must be a positive number of seconds, got " + given);
  }
  if (seconds > kMaxSeconds) {
    char most[32];
    std::snprintf(most, sizeof most, "%.0f", kMaxSeconds);
    throw py::value_error(std::string(field) + ": at most " + most + " seconds (100 years, the longest the client " +
                          "measures), got " + given);
  }
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(seconds * 1000.0)));
}

// ---- results and errors --------------------------------------------------------------------------

// Server text is not always UTF-8; a message must never fail to become a str.
py::str text(std::string_view s) {
  PyObject* decoded = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
  if (decoded == nullptr) throw py::error_already_set();  // out of memory
  return py::reinterpret_steal<py::str>(decoded);
}

template <class T>
py::object optional_int(const std::optional<T>& v) {
  return v ? py::object(py::int_(*v)) : py::object(py::none());
}

// The exception classes, defined in hf3fs_meta/_errors.py. The references are never released: the
// module lives as long as the interpreter.
PyObject* metadata_error = nullptr;
PyObject* invalid_argument_error = nullptr;

[[noreturn]] void raise(const Error& e) {
  const py::handle cls(e.code == errc::invalid_argument ? invalid_argument_error : metadata_error);
  const py::object exception =
      cls(text(e.message()), py::arg("code") = to_string(e.code), py::arg("operation") = to_string(e.operation),
          py::arg("status") = optional_int(e.status), py::arg("detail") = text(e.detail),
          py::arg("cause") = text(e.cause), py::arg("rank") = optional_int(e.rank), py::arg("sent") = e.sent,
          py::arg("attempts") = e.attempts, py::arg("reinitialized") = e.reinitialized,
          py::arg("request_id") = text(e.request_id), py::arg("stop_reason") = text(e.stop_reason));
  PyErr_SetObject(cls.ptr(), exception.ptr());
  throw py::error_already_set();
}

template <class T>
T value_or_raise(Result<T>&& r) {
  if (!r) raise(r.error());
  return std::move(r).value();
}
void value_or_raise(Result<void>&& r) {
  if (!r) raise(r.error());
}

// Runs a Client call with the GIL released.
template <class F>
auto released(F&& f) {
  py::gil_scoped_release release;
  return f();
}

py::list bools(const std::vector<bool>& v) {
  py::list out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = py::bool_(v[i]);
  return out;
}

py::list locations(const std::vector<std::optional<Page>>& v) {
  py::list out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = optional_int(v[i]);
  return out;
}

// GET /stats' figures under its names (protocol.hpp's tables), with the ranks keyed by rank.
py::dict stats_dict(const StateStats& stats) {
  py::dict ranks;
  for (const auto& [rank, r] : stats.ranks) {
    py::dict figures;
    for (const auto& [name, member] : protocol::kRankStatsFields) figures[py::str(name.data(), name.size())] = py::int_(r.*member);
    figures[py::str(protocol::kKeptOnReleaseField.data(), protocol::kKeptOnReleaseField.size())] =
        py::int_(r.kept_on_release);
    ranks[py::int_(rank)] = std::move(figures);
  }
  py::dict out;
  out["ranks"] = std::move(ranks);
  for (const auto& [name, member, counter, help] : protocol::kStateStatsFields) out[py::str(name.data(), name.size())] = py::int_(stats.*member);
  return out;
}

// The namespace calls' answers under the wire's names (docs/protocol.md, "Namespaces").
py::list rank_list(const std::vector<Rank>& ranks) {
  py::list out(ranks.size());
  for (std::size_t i = 0; i < ranks.size(); ++i) out[i] = py::int_(ranks[i]);
  return out;
}
py::list namespaces_list(const std::vector<NamespaceSummary>& namespaces) {
  py::list out(namespaces.size());
  for (std::size_t i = 0; i < namespaces.size(); ++i) {
    const NamespaceSummary& n = namespaces[i];
    py::dict entry;
    entry["name"] = py::str(n.name);
    entry["ranks"] = rank_list(n.ranks);
    entry["pages"] = py::int_(n.pages);
    entry["keys"] = py::int_(n.keys);
    out[i] = std::move(entry);
  }
  return out;
}
py::dict drop_namespace_dict(const std::string& name, const NamespaceDropOutcome& d) {
  py::dict out;
  out["namespace"] = py::str(name);
  out["dropped"] = py::bool_(d.dropped);
  out["ranks"] = py::int_(d.ranks);
  out["pages"] = py::int_(d.pages);
  out["keys_removed"] = py::int_(d.keys_removed);
  return out;
}
py::dict key_status_dict(const KeyStatusAnswer& answer) {
  py::list status(answer.status.size());
  for (std::size_t i = 0; i < answer.status.size(); ++i) {
    if (!answer.status[i]) {
      status[i] = py::none();
      continue;
    }
    py::dict entry;
    entry["ranks"] = rank_list(answer.status[i]->ranks);
    entry["tp_world_size"] = py::int_(answer.status[i]->tp_world_size);
    entry["complete"] = py::bool_(answer.status[i]->complete);
    status[i] = std::move(entry);
  }
  py::dict out;
  out["ranks_initialized"] = py::int_(answer.ranks_initialized);
  out["status"] = std::move(status);
  return out;
}

// ---- the clients ---------------------------------------------------------------------------------

// The value given, else the environment variable (as the CLI reads it), else empty: the bearer token
// of a server started with --auth-token-file ($HF3FS_META_TOKEN) and, for an https:// URL, the CA
// file that signed its certificate ($HF3FS_META_CA_FILE; empty: the system's CAs).
std::string given_or_env(std::optional<std::string> given, const char* variable) {
  if (given) return std::move(*given);
  const char* env = std::getenv(variable);
  return env != nullptr ? env : "";
}
// The token, refused (InvalidArgumentError naming where it came from) before anything is sent when
// it cannot be sent as a bearer token: a CR or LF in it would add headers to every request.
std::string token_or_env(std::optional<std::string> token) {
  const char* from = token ? "token=" : "$HF3FS_META_TOKEN";
  std::string value = given_or_env(std::move(token), "HF3FS_META_TOKEN");
  if (auto problem = internal::token_problem(value)) {
    Error e;
    e.code = errc::invalid_argument;
    e.detail = std::string(from) + ": " + *problem;
    raise(e);
  }
  return value;
}
// The namespace: given, else $HF3FS_META_NAMESPACE, else empty (the default namespace, no
// header). A name no header could carry is refused (InvalidArgumentError naming where it came from)
// before anything is sent.
std::string namespace_or_env(std::optional<std::string> ns) {
  const char* from = ns ? "namespace=" : "$HF3FS_META_NAMESPACE";
  std::string value = given_or_env(std::move(ns), "HF3FS_META_NAMESPACE");
  if (value.empty()) return value;
  if (auto problem = internal::namespace_problem(value)) {
    Error e;
    e.code = errc::invalid_argument;
    e.detail = std::string(from) + " " + *problem;
    raise(e);
  }
  return value;
}
std::string ca_file_or_env(std::optional<std::string> ca_file) {
  return given_or_env(std::move(ca_file), "HF3FS_META_CA_FILE");
}

// The endpoints `url` names (`field`: the argument's name): one URL, "URL,URL,..." (the drop-in's
// way, a str vLLM's config carries as it is), or a list or tuple of URLs; refused before anything is
// sent (InvalidArgumentError naming the argument and the entry's index) when one is not a URL.
std::vector<std::string> endpoints_of(py::handle url, const char* field) {
  std::vector<std::string> endpoints =
      PyUnicode_Check(url.ptr()) ? split_endpoints(as_str(url, Where{field})) : strings(url, field);
  if (auto problem = internal::endpoint_list_problem(endpoints, field)) {
    Error e;
    e.code = errc::invalid_argument;
    e.detail = std::move(*problem);
    raise(e);
  }
  return endpoints;
}

ClientOptions client_options(py::handle url, std::optional<double> timeout, std::optional<int> attempts,
                             std::optional<double> deadline, std::optional<std::string> token,
                             std::optional<std::string> ca_file, std::optional<std::string> ns) {
  ClientOptions options;
  options.endpoints = endpoints_of(url, "url");
  options.auth_token = token_or_env(std::move(token));
  options.namespace_name = namespace_or_env(std::move(ns));
  options.ca_file = ca_file_or_env(std::move(ca_file));
  if (timeout) options.request_timeout = milliseconds_of(*timeout, "timeout");
  if (attempts || deadline) {
    if (attempts && *attempts < 1) throw py::value_error("attempts: must be at least 1, got " + std::to_string(*attempts));
    const LimitedAttemptsRetryPolicy defaults;
    options.retry_policy = std::make_shared<LimitedAttemptsRetryPolicy>(
        attempts.value_or(defaults.max_attempts()), deadline ? milliseconds_of(*deadline, "deadline") : defaults.deadline());
  }
  return options;
}

// The calls, shared by the three client classes: arguments in, results out, the GIL released.
struct PyClient {
  explicit PyClient(ClientOptions options) : client(std::move(options)) {}
  Client client;

  // initialize (register = false) or ensure_initialized (register = true).
  py::str initialize(py::handle rank, py::handle num_pages, py::handle role, bool register_it) {
    const Rank r = as_int(rank, Where{"rank"});
    const std::int64_t n = as_int(num_pages, Where{"num_pages"});
    const Role ro = role_of(role);
    return text(value_or_raise(released([&] {
      return register_it ? client.ensure_initialized(r, n, ro) : client.initialize(r, n, ro);
    })));
  }
  void register_rank(py::handle rank, py::handle num_pages, py::handle role) {
    client.register_rank(as_int(rank, Where{"rank"}), as_int(num_pages, Where{"num_pages"}), role_of(role));
  }
  // The pages in key order; `key_objects`, when given, receives each key's str.
  std::vector<Page> allocate(py::handle rank, py::handle keys, std::vector<py::object>* key_objects) {
    const Rank r = as_int(rank, Where{"rank"});
    const auto blocks = block_keys(keys, key_objects);
    return value_or_raise(released([&] { return client.allocate(r, blocks); }));
  }
  void confirm_write(py::handle rank, py::handle confirmed, const char* field, py::handle releases) {
    const Rank r = as_int(rank, Where{"rank"});
    const auto c = confirmations(confirmed, field);
    const auto p = pages(releases, "pages_to_release");
    value_or_raise(released([&] { return client.confirm_write(r, c, p); }));
  }
  py::list batch_exists(py::handle keys) {
    const auto k = strings(keys, "keys");
    return bools(value_or_raise(released([&] { return client.batch_exists(k); })));
  }
  py::list get_locations(py::handle rank, py::handle keys) {
    const Rank r = as_int(rank, Where{"rank"});
    const auto k = strings(keys, "keys");
    return locations(value_or_raise(released([&] { return client.get_locations(r, k); })));
  }
  py::list delete_keys(py::handle keys) {
    const auto k = strings(keys, "keys");
    return bools(value_or_raise(released([&] { return client.delete_keys(k); })));
  }
  py::dict stats() { return stats_dict(value_or_raise(released([&] { return client.stats(); }))); }
  void clear() {
    value_or_raise(released([&] { return client.clear(); }));
  }
  py::list namespaces() { return namespaces_list(value_or_raise(released([&] { return client.namespaces(); }))); }
  py::dict drop_namespace(const std::string& name) {
    return drop_namespace_dict(name, value_or_raise(released([&] { return client.drop_namespace(name); })));
  }
  py::dict key_status(py::handle keys) {
    const auto k = strings(keys, "keys");
    return key_status_dict(value_or_raise(released([&] { return client.key_status(k); })));
  }
};

struct PyLocalClient : PyClient {
  PyLocalClient() : PyClient(local_options()) {}
  static ClientOptions local_options() {
    ClientOptions options;
    options.transport = make_in_process_transport(std::make_shared<MetadataState>());
    return options;
  }
};

// hf3fs_meta.Hf3fsGlobalMetadataClient: vLLM's client's methods, arguments and return shapes.
struct PyGlobalMetadataClient {
  PyGlobalMetadataClient(py::handle base_url, int max_retries, std::optional<std::string> ns)
      : core(options(base_url, max_retries, std::move(ns))) {}
  PyClient core;

  static ClientOptions options(py::handle base_url, int max_retries, std::optional<std::string> ns) {
    if (max_retries < 0) throw py::value_error("max_retries: must be 0 or more, got " + std::to_string(max_retries));
    ClientOptions o;
    o.endpoints = endpoints_of(base_url, "base_url");
    o.auth_token = token_or_env(std::nullopt);
    // An unmodified vLLM constructs this with two arguments: $HF3FS_META_NAMESPACE puts it in a namespace.
    o.namespace_name = namespace_or_env(std::move(ns));
    o.ca_file = ca_file_or_env(std::nullopt);
    // vLLM's urllib3 Retry(total=max_retries, backoff_factor=0.3): one first attempt and max_retries
    // retries, for every failure, a refused connection included (a down server fails a call in
    // about the time vLLM's client takes, instead of stalling its scheduler until the deadline),
    // with urllib3's backoff, and no retry budget (urllib3 has none). The 10 s deadline still bounds
    // a call; the rest of the SDK's policy (what is safe to repeat, re-initialization) is kept.
    const int attempts = max_retries < INT_MAX ? max_retries + 1 : INT_MAX;
    o.retry_policy = std::make_shared<LimitedAttemptsRetryPolicy>(attempts, LimitedAttemptsRetryPolicy().deadline(),
                                                                  Unreachable::count);
    o.backoff_policy = std::make_shared<Urllib3BackoffPolicy>();
    o.retry_budget.failure_cost = 0;
    return o;
  }
};

py::list pages_of(const std::vector<Page>& pages) {
  py::list out(pages.size());
  for (std::size_t i = 0; i < pages.size(); ++i) out[i] = py::int_(pages[i]);
  return out;
}

// vLLM's shape: [[key, page], ...], with the caller's own key objects.
py::list key_page_pairs(const std::vector<Page>& pages, const std::vector<py::object>& keys) {
  py::list out(pages.size());
  for (std::size_t i = 0; i < pages.size(); ++i) {
    py::list pair(2);
    pair[0] = keys[i];
    pair[1] = py::int_(pages[i]);
    out[i] = std::move(pair);
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "The C++ binding behind hf3fs_meta; import hf3fs_meta instead.";
  // The project's version (CMakeLists.txt's project(), passed by python/CMakeLists.txt).
  m.attr("__version__") = HF3FS_META_VERSION;
  {
    const py::module_ errors = py::module_::import("hf3fs_meta._errors");
    metadata_error = py::object(errors.attr("MetadataError")).release().ptr();
    invalid_argument_error = py::object(errors.attr("InvalidArgumentError")).release().ptr();
  }

  using Self = PyClient&;
  using DropIn = PyGlobalMetadataClient&;
  const auto rank = py::arg("rank");
  const auto keys = py::arg("keys");
  const auto role = py::arg("role") = "worker";

  // Docstrings here are the short forms help() shows; __init__.pyi and the README say more.
  py::class_<PyClient>(m, "Client", "A client of the HF3FS metadata service; safe to share between threads.")
      .def(py::init([](py::object url, std::optional<double> timeout, std::optional<int> attempts,
                       std::optional<double> deadline, std::optional<std::string> token,
                       std::optional<std::string> ca_file, std::optional<std::string> ns) {
             return std::make_unique<PyClient>(client_options(url, timeout, attempts, deadline, std::move(token),
                                                              std::move(ca_file), std::move(ns)));
           }),
           py::arg("url") = ClientOptions().base_url, py::kw_only(), py::arg("timeout") = py::none(),
           py::arg("attempts") = py::none(), py::arg("deadline") = py::none(), py::arg("token") = py::none(),
           py::arg("ca_file") = py::none(), py::arg("namespace") = py::none())
      .def("initialize", [](Self c, py::handle r, py::handle n, py::handle ro) { return c.initialize(r, n, ro, false); },
           rank, py::arg("num_pages"), role, "Initialize a rank without registering it; returns the server's message.")
      .def("ensure_initialized",
           [](Self c, py::handle r, py::handle n, py::handle ro) { return c.initialize(r, n, ro, true); }, rank,
           py::arg("num_pages"), role,
           "Initialize a rank and, for a worker, register it: the client restores it after a server restart.")
      .def("register_rank", &PyClient::register_rank, rank, py::arg("num_pages"), role,
           "Register a worker rank without sending anything.")
      .def("allocate", [](Self c, py::handle r, py::handle k) { return pages_of(c.allocate(r, k, nullptr)); }, rank,
           keys, "Allocate a page per key; returns the pages in key order, -1 where none was free.")
      .def("confirm_write",
           [](Self c, py::handle r, py::handle conf, py::handle rel) { c.confirm_write(r, conf, "confirmations", rel); },
           rank, py::arg("confirmations"), py::arg("pages_to_release") = py::tuple(),
           "Record (key, page) writes, then release pages.")
      .def("batch_exists", &PyClient::batch_exists, keys, "Whether each key is complete.")
      .def("get_locations", &PyClient::get_locations, rank, keys, "The rank's page of each complete key, else None.")
      .def("delete_keys", &PyClient::delete_keys, keys,
           "Remove keys from every lookup (a reference-server extension); whether each existed.")
      .def("stats", &PyClient::stats,
           "Pages by state per rank, keys, evictions, deletions, reclaims (a reference-server extension).")
      .def("clear", &PyClient::clear, "Make the server forget every rank and key of this client's namespace.")
      .def("namespaces", &PyClient::namespaces,
           "Every namespace with its ranks, pages and keys (a reference-server extension; an operator's call).")
      .def("drop_namespace", &PyClient::drop_namespace, py::arg("name"),
           "Drop a namespace with its ranks, pages and keys (a reference-server extension; an operator's call).")
      .def("key_status", &PyClient::key_status, keys,
           "Why each key is or is not complete: the ranks that confirmed it, the tp_world_size it needs.");

  py::class_<PyLocalClient, PyClient>(m, "LocalClient",
                                      "The same calls in this process, over an in-memory state: no server.")
      .def(py::init<>());

  py::class_<PyGlobalMetadataClient>(m, "Hf3fsGlobalMetadataClient",
                                     "A drop-in for vLLM's Hf3fsGlobalMetadataClient, with the SDK's guarantees.")
      .def(py::init<py::object, int, std::optional<std::string>>(), py::arg("base_url") = "http://localhost:18000",
           py::arg("max_retries") = 3, py::arg("namespace") = py::none())
      .def("initialize", [](DropIn c, py::handle r, py::handle n, py::handle ro) { c.core.initialize(r, n, ro, true); },
           rank, py::arg("num_pages") = 0, role)
      .def("allocate_pages_for_keys",
           [](DropIn c, py::handle r, py::handle k) {
             std::vector<py::object> key_objects;
             const auto allocations = c.core.allocate(r, k, &key_objects);
             return key_page_pairs(allocations, key_objects);
           },
           rank, keys)
      .def("confirm_write_for_keys",
           [](DropIn c, py::handle r, py::handle conf, py::handle rel) {
             c.core.confirm_write(r, conf, "key_confirmations", rel);
           },
           rank, py::arg("key_confirmations"), py::arg("pages_to_release") = py::none())
      .def("batch_key_exists", [](DropIn c, py::handle k) { return c.core.batch_exists(k); }, keys)
      .def("get_key_locations", [](DropIn c, py::handle r, py::handle k) { return c.core.get_locations(r, k); },
           rank, keys);
}
