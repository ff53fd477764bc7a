// AtomicFile (see ember/nn/atomic_file.h): mkstemp, write, fsync, rename, fsync
// of the directory.
#include "ember/nn/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "ember/core/error.h"

namespace ember {

namespace {
std::string reason() { return std::strerror(errno); }

std::string directory_of(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}
}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  const std::filesystem::path p(path_);
  EMBER_CHECK(!p.filename().empty(), "AtomicFile: \"" << path_ << "\" names no file");
  std::string pattern = directory_of(path_) + "/." + p.filename().string() + ".tmp.XXXXXX";
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  fd_ = ::mkstemp(name.data());
  EMBER_CHECK(fd_ >= 0, "cannot write " << path_ << ": creating a temporary file in " << directory_of(path_)
                                        << " failed: " << reason());
  temp_path_ = name.data();
  if (::fchmod(fd_, 0644) != 0) {
    const std::string why = reason();
    ::close(fd_);
    ::unlink(temp_path_.c_str());
    EMBER_FAIL("cannot write " << path_ << ": chmod of " << temp_path_ << " failed: " << why);
  }
}

AtomicFile::~AtomicFile() {
  if (committed_) return;
  if (fd_ >= 0) ::close(fd_);
  ::unlink(temp_path_.c_str());
}

void AtomicFile::write(const void* data, size_t size) {
  EMBER_INTERNAL_ASSERT(!committed_ && fd_ >= 0, "AtomicFile::write: " << path_ << " was already committed");
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0 && errno == EINTR) continue;
    EMBER_CHECK(n > 0, "cannot write " << path_ << ": writing " << temp_path_ << " failed: " << reason());
    p += n;
    size -= size_t(n);
  }
}

void AtomicFile::commit() {
  EMBER_INTERNAL_ASSERT(!committed_ && fd_ >= 0, "AtomicFile::commit: " << path_ << " was already committed");
  EMBER_CHECK(::fsync(fd_) == 0, "cannot write " << path_ << ": fsync of " << temp_path_ << " failed: " << reason());
  const int fd = fd_;
  fd_ = -1;
  EMBER_CHECK(::close(fd) == 0, "cannot write " << path_ << ": closing " << temp_path_ << " failed: " << reason());
  EMBER_CHECK(::rename(temp_path_.c_str(), path_.c_str()) == 0,
              "cannot write " << path_ << ": renaming " << temp_path_ << " to it failed: " << reason());
  committed_ = true;
  const std::string dir = directory_of(path_);
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  EMBER_CHECK(dir_fd >= 0, "wrote " << path_ << " but could not open its directory to fsync it: " << reason());
  const int rc = ::fsync(dir_fd);
  const std::string why = rc != 0 ? reason() : "";
  ::close(dir_fd);
  EMBER_CHECK(rc == 0, "wrote " << path_ << " but the fsync of its directory " << dir << " failed: " << why);
}

}  // namespace ember
