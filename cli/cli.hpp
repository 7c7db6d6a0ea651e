// The hf3fs-meta command-line tool, as a function so that tests can run it in-process.
#pragma once

#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "hf3fs_meta/transport.hpp"

namespace hf3fs_meta::cli {

// Exit statuses, by what went wrong.
enum Exit : int {
  kSuccess = 0,
  kServerRefused = 1,  // the server answered with an error
  kUsage = 2,          // bad command line, or invalid_argument (refused before sending)
  kNoAnswer = 3,       // connection_failed, timeout, unavailable
  kProtocol = 4,       // protocol_error
};

struct Environment {
  std::string default_url;               // $HF3FS_META_URL (URL or URL,URL,...), else http://127.0.0.1:18000
  std::string default_token;             // $HF3FS_META_TOKEN: the bearer token unless --token-file
  std::string default_namespace;         // $HF3FS_META_NAMESPACE: the namespace unless --namespace
  std::shared_ptr<Transport> transport;  // tests: a transport to use instead of libcurl
};

// args excludes the program name. Writes results to out, errors and notes to err.
int run(const std::vector<std::string>& args, const Environment& env, std::ostream& out, std::ostream& err);

}  // namespace hf3fs_meta::cli
