// Reading the SDK's errors: switch on the code, read the cause and the rank the server named, and
// let `.value()` throw when exceptions suit the caller better. Each case below is provoked on
// purpose against the reference server (its 409 and its num_pages maximum are its own deviations).
#include <iostream>
#include <string>
#include <system_error>
#include <vector>

#include "example_support.hpp"
#include "hf3fs_meta/client.hpp"

using namespace hf3fs_meta;

namespace {

// What a worker does about each kind of failure.
std::string advice(const Error& e) {
  switch (e.code) {
    case errc::invalid_argument:
      return "a bug in the caller: fix the input (nothing was sent)";
    case errc::rank_not_initialized:
      return e.reinitialized ? "the server restarted: allocate again" : "initialize the rank, or register it";
    case errc::invalid_initialization:
      return "choose a page count the server accepts";
    case errc::stale_allocation:
      return "the page is not ours any more: allocate again";
    case errc::connection_failed:
    case errc::timeout:
    case errc::unavailable:
      return e.sent ? "the server may have applied it: check before repeating" : "the server is down: try later";
    case errc::invalid_request:
    case errc::validation_error:
      return "the request was malformed";
    default:
      return "report it";
  }
}

void show(std::string_view what, const Error& e, errc expected) {
  std::cout << what << ": " << to_string(e.code);
  if (e.status) std::cout << " (HTTP " << *e.status << ")";
  if (!e.cause.empty()) std::cout << ", cause \"" << e.cause << "\"";
  if (e.rank) std::cout << ", rank " << *e.rank;
  std::cout << " -> " << advice(e) << "\n  " << e.message() << '\n';
  example::expect(e.code == expected, std::string(what) + ": expected " + std::string(to_string(expected)));
}

template <class T>
const Error& error_of(const Result<T>& r, std::string_view what) {
  example::expect(!r, std::string(what) + " should fail");
  return r.error();
}

}  // namespace

int main(int argc, char** argv) {
  ClientOptions options;
  options.base_url = example::server_url(argc, argv);
  Client client(std::move(options));

  auto empty_key = client.allocate(0, {""});
  show("an empty key", error_of(empty_key, "an empty key"), errc::invalid_argument);

  auto unknown_rank = client.allocate(99, {example::block_key("x")});
  const Error& e = error_of(unknown_rank, "allocate on rank 99");
  show("allocate on a rank nobody initialized", e, errc::rank_not_initialized);
  example::expect(e.rank == 99, "the server named rank 99");

  auto too_big = client.initialize(5, std::int64_t{1} << 40);
  show("initialize with 2^40 pages", error_of(too_big, "2^40 pages"), errc::invalid_initialization);

  example::must(client.ensure_initialized(7, 8), "initialize rank 7");
  auto stale = client.confirm_write(7, {{example::block_key("never allocated"), 5}});
  show("confirm a page that was never allocated", error_of(stale, "a stale confirm"), errc::stale_allocation);

  auto malformed = client.raw("/keys/batch_allocate", R"({"rank": 7, "keys": ["not-a-pair"]})");
  show("a malformed raw request", error_of(malformed, "a malformed request"), errc::invalid_request);

  ClientOptions nowhere;
  nowhere.base_url = "http://127.0.0.1:1";  // nothing listens on port 1
  nowhere.retry_policy = std::make_shared<LimitedAttemptsRetryPolicy>(2, std::chrono::seconds(2));
  Client offline(std::move(nowhere));
  auto down = offline.batch_exists({example::block_key("y")});
  show("a server that is not there", error_of(down, "no server"), errc::connection_failed);
  example::expect(!down.error().sent, "a refused connection never sent the request");

  // Exceptions, for callers that prefer them: value() throws std::system_error with our code.
  try {
    client.get_locations(98, {example::block_key("z")}).value();
    example::expect(false, "value() should have thrown");
  } catch (const std::system_error& ex) {
    example::expect(ex.code() == errc::rank_not_initialized, "the exception carries the code");
    std::cout << "value() threw std::system_error: " << ex.code().message() << '\n';
  }
  return 0;
}
