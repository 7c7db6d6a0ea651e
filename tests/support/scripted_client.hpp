// ScriptedClientTest: the fixture of the client's tests over a ScriptedTransport, with the fake
// clock and sleeper (time passes only as the client sleeps) and an observer that records retries;
// and FixedBackoff, for deadline arithmetic.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <utility>

#include "hf3fs_meta/client.hpp"
#include "support/fakes.hpp"

namespace hf3fs_meta::testing {

// Always waits the same: makes the clock arithmetic of deadline tests exact.
class FixedBackoff final : public BackoffPolicy {
 public:
  explicit FixedBackoff(std::chrono::nanoseconds d) : d_(d) {}
  std::unique_ptr<BackoffPolicy> clone() const override { return std::make_unique<FixedBackoff>(*this); }
  std::chrono::nanoseconds delay(int, double) const override { return d_; }

 private:
  std::chrono::nanoseconds d_;
};

class ScriptedClientTest : public ::testing::Test {
 protected:
  std::unique_ptr<Client> make_client(ClientOptions options = {}) {
    options.transport = transport;
    options.clock = clock;
    options.sleeper = sleeper;
    options.observer = observer;
    return std::make_unique<Client>(std::move(options));
  }

  std::shared_ptr<ScriptedTransport> transport = std::make_shared<ScriptedTransport>();
  std::shared_ptr<FakeClock> clock = std::make_shared<FakeClock>();
  std::shared_ptr<FakeSleeper> sleeper = std::make_shared<FakeSleeper>(clock);
  std::shared_ptr<RecordingObserver> observer = std::make_shared<RecordingObserver>();
};

}  // namespace hf3fs_meta::testing
