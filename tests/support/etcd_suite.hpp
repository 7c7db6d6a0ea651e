// EtcdSuite: a GoogleTest fixture whose tests share one 3-member etcd cluster (EtcdCluster), started
// before a suite's first test and stopped after its last; every test starts with each running member
// healthy (a test that kills one restarts it, and the next waits for it).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "support/etcd_cluster.hpp"

namespace hf3fs_meta::testing {

class EtcdSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = std::make_unique<EtcdCluster>(3); }
  static void TearDownTestSuite() { cluster_.reset(); }
  void SetUp() override {
    ASSERT_NE(cluster_, nullptr) << "the suite's etcd cluster did not start";
    ASSERT_NO_THROW(cluster_->wait_healthy(std::chrono::seconds(20)));
  }

  // The running test's name: a prefix of keys of its own, so that tests do not see each other's.
  static std::string test_name() { return ::testing::UnitTest::GetInstance()->current_test_info()->name(); }

  static inline std::unique_ptr<EtcdCluster> cluster_;
};

}  // namespace hf3fs_meta::testing
