// The durable layer's one error idiom: a Result whose error carries a code (what kind of failure,
// for callers that act on it) and a message (for people: it names the file, and the offset where
// there is one).
#pragma once

#include <string>

#include <boost/outcome/result.hpp>

namespace hf3fs_meta::durable {

enum class Errc {
  io = 1,        // a system call failed (the message ends with errno's text)
  corrupt,       // a file's bytes are not what its format says: a checksum, a truncation, an unknown value
  unsupported,   // a format version (or a record kind, a route) newer than this server
  inconsistent,  // whole files that do not fit together or the state: a missing journal, a record the state refuses
  in_use,        // another process holds the data dir
  journal_failed,  // the journal failed (a write or a sync) and is not rolled back yet
};

struct Error {
  Errc code = Errc::io;
  std::string message;
};

template <class T>
using Result = boost::outcome_v2::result<T, Error, boost::outcome_v2::policy::terminate>;

}  // namespace hf3fs_meta::durable
