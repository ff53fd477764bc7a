// AtomicFile: writes a file so that a reader (or a crash) sees either the
// old file or the complete new one, never a partial write.
//
// Contract: the constructor creates a temporary file in the directory of
// `path` (so the final rename stays on one file system); write() appends to
// it; commit() flushes it to disk (fsync), renames it over `path` and
// fsyncs the directory, so the new name survives a power loss. If commit()
// is never reached (an exception, an early return), the destructor removes
// the temporary file. Every failure is an ember::Error naming the path and
// the system's reason. The new file gets mode 0644.
#pragma once

#include <cstddef>
#include <string>

namespace ember {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t size);
  void commit();
  const std::string& temp_path() const { return temp_path_; }

 private:
  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace ember
