// Helpers shared by the server tests: a fixture owning a server process, and request shorthands.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "support/raw_http.hpp"
#include "support/server_process.hpp"

namespace hf3fs_meta::testing {

using Headers = std::vector<std::pair<std::string, std::string>>;

inline std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Waits (bounded) until the file at `path` (a server's stderr) holds `line`; true once it does.
inline bool wait_for_log(const std::string& path, std::string_view line,
                         std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (read_all(path).find(line) == std::string::npos) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // between polls; orders nothing
  }
  return true;
}

class ServerTestBase : public ::testing::Test {
 protected:
  explicit ServerTestBase(std::vector<std::string> args = {"--threads", "2"}) : server_(std::move(args)) {}

  // A server that exits non-zero on SIGTERM failed: a sanitizer report, a crash, a hang.
  void TearDown() override { EXPECT_EQ(server_.terminate(), 0); }

  RawResponse post(std::string_view target, std::string_view body, const Headers& headers = {}) {
    return raw_request(server_.host(), server_.port(), "POST", target, body, headers);
  }
  RawResponse get(std::string_view target) { return raw_request(server_.host(), server_.port(), "GET", target); }
  RawResponse send(std::string_view method, std::string_view target, std::string_view body = {},
                   const Headers& headers = {}) {
    return raw_request(server_.host(), server_.port(), method, target, body, headers);
  }

  void initialize(int rank, int pages) {
    auto r = post("/rank/" + std::to_string(rank) + "/initialize",
                  R"({"num_pages":)" + std::to_string(pages) + "}");
    ASSERT_EQ(r.status, 200) << r.body;
  }

  // batch_allocate of one key on a rank; the whole answer.
  RawResponse allocate(int rank, std::string_view key, const Headers& headers = {}) {
    return post("/keys/batch_allocate",
                R"({"rank":)" + std::to_string(rank) + R"(,"keys":[[")" + std::string(key) + R"(",""]]})",
                headers);
  }

  // The value of one metric line (exact name with labels), or nullopt.
  std::optional<std::string> metric(std::string_view series) {
    const auto body = get("/metrics").body;
    const std::string prefix = std::string(series) + " ";
    std::size_t pos = 0;
    while (pos < body.size()) {
      auto end = body.find('\n', pos);
      if (end == std::string::npos) end = body.size();
      std::string_view line(body.data() + pos, end - pos);
      if (line.substr(0, prefix.size()) == prefix) return std::string(line.substr(prefix.size()));
      pos = end + 1;
    }
    return std::nullopt;
  }

  ServerProcess server_;
};

// The fault rules of a server run with --enable-fault-injection, and the event they let a test wait
// for instead of sleeping: a rule leaves once its `times` are used up, so "no rule armed" means that
// the server has taken every request the rules were added for.
class FaultRules {
 public:
  // Each request on a connection of its own.
  explicit FaultRules(const ServerProcess& server)
      : post_([&server](std::string_view body) {
          return raw_request(server.host(), server.port(), "POST", "/_faults", body);
        }) {}
  // Every request on `connection` (kept alive): for a test that counts the server's connections.
  explicit FaultRules(RawConnection& connection)
      : post_([&connection](std::string_view body) { return connection.request("POST", "/_faults", body); }) {}

  // Adds a rule (the JSON of a POST /_faults); fails the test if the server refuses it.
  void add(std::string_view rule) {
    const auto r = post_(rule);
    EXPECT_EQ(r.status, 200) << rule << ": " << r.body;
  }

  // How many rules are still armed. Asked by adding a rule that no request matches (its path is
  // never requested) and reading back how many rules the server holds, these probes left out.
  std::size_t armed() {
    const auto r = post_(R"({"path":"/_faults/never-requested","status":503})");
    constexpr std::string_view kPrefix = R"({"rules":)";
    if (r.status != 200 || r.body.rfind(kPrefix, 0) != 0) {
      ADD_FAILURE() << "POST /_faults: " << r.status << " " << r.body;
      return 0;
    }
    return static_cast<std::size_t>(std::stoull(r.body.substr(kPrefix.size()))) - ++probes_;
  }

  // Waits until at most `n` rules are armed: true, or false after `timeout`.
  bool wait_until_armed(std::size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (armed() > n) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // between polls; orders nothing
    }
    return true;
  }

 private:
  std::function<RawResponse(std::string_view)> post_;
  std::size_t probes_ = 0;
};

inline std::string allocate_answer(int rank, std::string_view key, int page) {
  return R"({"rank":)" + std::to_string(rank) + R"(,"results":[[")" + std::string(key) + R"(",)" +
         std::to_string(page) + "]]}";
}

}  // namespace hf3fs_meta::testing
