// A self-signed certificate and its key, made at test time with the openssl command (P-256, valid
// one day, for 127.0.0.1 and localhost): the server's TLS identity, and the CA file a client trusts.
#pragma once

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "support/temp_file.hpp"

namespace hf3fs_meta::testing {

class TestCertificate {
 public:
  TestCertificate() : cert_(""), key_("") {
    const std::string command =
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=127.0.0.1"
        " -addext subjectAltName=IP:127.0.0.1,DNS:localhost -keyout '" + key_.path() + "' -out '" + cert_.path() +
        "' 2>/dev/null";
    if (std::system(command.c_str()) != 0) throw std::runtime_error("openssl could not make a test certificate");
  }

  const std::string& cert_path() const noexcept { return cert_.path(); }
  const std::string& key_path() const noexcept { return key_.path(); }

 private:
  TempFile cert_;
  TempFile key_;
};

}  // namespace hf3fs_meta::testing
