// HTTPS: the server with --tls-cert/--tls-key, the SDK with an https:// URL and a CA file. The
// certificates are made at test time.
#include <sys/wait.h>

#include <cstdio>
#include <stdexcept>

#include "contract/contract_support.hpp"
#include "support/temp_file.hpp"
#include "support/test_certificate.hpp"

namespace hf3fs_meta::contract {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

class ContractTlsTest : public ::testing::Test {
 protected:
  static inline testing::TestCertificate server_cert;
  static inline testing::TestCertificate other_cert;  // a CA that did not sign the server's certificate

  ServerProcess server_{{"--threads", "2", "--tls-cert", server_cert.cert_path(), "--tls-key", server_cert.key_path()}};

  ClientOptions options(const std::string& ca_file) {
    auto o = fast_options(server_, 1);
    o.ca_file = ca_file;
    return o;
  }

  void TearDown() override { EXPECT_EQ(server_.terminate(), 0); }
};

TEST_F(ContractTlsTest, TheSdkTalksToTheServerOverTls) {
  EXPECT_THAT(server_.startup_line(), StartsWith("listening on https://127.0.0.1:"));
  ASSERT_THAT(server_.base_url(), StartsWith("https://"));
  Client client(options(server_cert.cert_path()));
  ASSERT_THAT(client.initialize(0, 8), IsOk());
  auto allocated = client.allocate(0, {"k"});
  ASSERT_THAT(allocated, IsOk());
  ASSERT_EQ(allocated.value().size(), 1u);
  ASSERT_THAT(client.confirm_write(0, {Confirmation{"k", allocated.value()[0]}}), IsOk());
  EXPECT_THAT(client.batch_exists({"k", "other"}), HasValue(std::vector<bool>{true, false}));
  // A 4xx travels back over TLS as well, and one connection carries many requests.
  auto refused = client.raw("/keys/batch_exists", "[");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().status, 400);
  for (int i = 0; i < 20; ++i) ASSERT_THAT(client.batch_exists({"k"}), IsOk());
}

TEST_F(ContractTlsTest, ACertificateFromAnotherCaIsRefusedAndNothingIsSent) {
  Client wrong(options(other_cert.cert_path()));
  auto r = wrong.initialize(0, 8);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::connection_failed);
  EXPECT_THAT(r.error().message(), HasSubstr("certificate"));
  // Nothing reached the server: the rank does not exist, for a client that trusts the right CA.
  Client right(options(server_cert.cert_path()));
  auto locations = right.get_locations(0, {"k"});
  ASSERT_FALSE(locations);
  EXPECT_EQ(locations.error().code, errc::rank_not_initialized);
}

TEST_F(ContractTlsTest, PlainHttpToTheTlsPortGetsNoAnswer) {
  auto o = options("");
  o.base_url = "http://127.0.0.1:" + std::to_string(server_.port());
  Client plain(o);
  auto r = plain.batch_exists({"k"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::connection_failed);
}

TEST(ContractTlsOptionsTest, TokenAndTlsTogether) {
  testing::TestCertificate cert;
  testing::TempFile token("tls-token\n");
  ServerProcess server({"--threads", "1", "--tls-cert", cert.cert_path(), "--tls-key", cert.key_path(),
                        "--auth-token-file", token.path()});
  auto o = fast_options(server, 1);
  o.ca_file = cert.cert_path();
  Client without(o);
  auto r = without.clear();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().status, 401);
  o.auth_token = "tls-token";
  Client with(o);
  EXPECT_THAT(with.clear(), IsOk());
  EXPECT_EQ(server.terminate(), 0);
}

// Each option the server cannot serve with stops it before it listens: exit 2 (as a bad flag) and
// the reason, naming the files.
TEST(ContractTlsOptionsTest, UnusableCertificateOptionsStopTheServer) {
  testing::TestCertificate cert;
  testing::TestCertificate other;
  testing::TempFile not_pem("not a certificate\n");
  const auto run = [](std::vector<std::string> tls) {
    std::vector<std::string> args{"--host", "127.0.0.1", "--port", "0"};
    args.insert(args.end(), tls.begin(), tls.end());
    return ServerProcess::run_to_exit(args);
  };
  const auto stopped = [](const ServerProcess::Finished& r, const std::string& reason) {
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_THAT(r.output, HasSubstr(reason));
    EXPECT_THAT(r.output, Not(HasSubstr("listening on")));
  };
  stopped(run({"--tls-cert", cert.cert_path()}), "--tls-cert requires --tls-key");
  stopped(run({"--tls-cert", cert.cert_path(), "--tls-key", "/nonexistent/key.pem"}),
          "--tls-key: File does not exist: /nonexistent/key.pem");
  stopped(run({"--tls-cert", not_pem.path(), "--tls-key", cert.key_path()}),
          "--tls-cert " + not_pem.path() + " --tls-key " + cert.key_path() + ": use_certificate_chain_file");
  stopped(run({"--tls-cert", cert.cert_path(), "--tls-key", not_pem.path()}),
          "--tls-key " + not_pem.path() + ": use_private_key_file");
  stopped(run({"--tls-cert", cert.cert_path(), "--tls-key", other.key_path()}),  // another certificate's key
          "--tls-key " + other.key_path() + ": use_private_key_file: key values mismatch");
}

// `openssl s_client` offering only `version` (-tls1, -tls1_1, ...) at the server, at the client's
// lowest security level so that the client itself does not rule the old versions out: its exit
// status and what it printed.
ServerProcess::Finished handshake(const ServerProcess& server, const std::string& version) {
  const std::string command = "openssl s_client -connect 127.0.0.1:" + std::to_string(server.port()) + " " + version +
                              " -cipher DEFAULT@SECLEVEL=0 </dev/null 2>&1";
  ServerProcess::Finished out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) throw std::runtime_error("popen: " + command);
  char buffer[4096];
  while (const auto n = std::fread(buffer, 1, sizeof buffer, pipe)) out.output.append(buffer, n);
  const int status = ::pclose(pipe);
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

// README: the server speaks TLS 1.2 and 1.3 only. The server refuses the older versions itself
// (its "protocol version" alert), while the same client gets 1.2 and 1.3.
TEST_F(ContractTlsTest, VersionsBelowTls12AreRefused) {
  for (const std::string version : {"-tls1", "-tls1_1"}) {
    const auto h = handshake(server_, version);
    EXPECT_NE(h.exit_code, 0) << version << ":\n" << h.output;
    EXPECT_THAT(h.output, HasSubstr("alert protocol version")) << version << ":\n" << h.output;
  }
  for (const std::string version : {"-tls1_2", "-tls1_3"}) {
    const auto h = handshake(server_, version);
    EXPECT_EQ(h.exit_code, 0) << version << ":\n" << h.output;
    EXPECT_THAT(h.output, HasSubstr("New, TLSv1." + version.substr(6) + ", Cipher is ")) << version << ":\n" << h.output;
  }
}

}  // namespace
}  // namespace hf3fs_meta::contract
