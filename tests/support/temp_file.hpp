// TempFile: a file with given content under $TMPDIR (or /tmp), removed when the object dies. For
// tests that hand a server or a client a path: token files, certificates, keys.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>

namespace hf3fs_meta::testing {

class TempFile {
 public:
  explicit TempFile(std::string_view content) {
    const char* dir = std::getenv("TMPDIR");
    path_ = std::string(dir && *dir ? dir : "/tmp") + "/hf3fs-meta-test-XXXXXX";
    const int fd = ::mkstemp(path_.data());
    if (fd < 0) throw std::runtime_error("mkstemp failed for " + path_);
    const bool written = ::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size());
    ::close(fd);
    if (!written) throw std::runtime_error("cannot write " + path_);
  }
  ~TempFile() { std::remove(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

}  // namespace hf3fs_meta::testing
