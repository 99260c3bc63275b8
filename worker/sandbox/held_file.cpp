#include "worker/sandbox/held_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace kiln::worker::sandbox {

using common::ErrnoStatus;
using common::Status;
using common::StatusOr;

HeldFile HeldFile::Open(std::string path, int flags) {
  HeldFile f;
  f.fd_ = common::UniqueFd(::open(path.c_str(), flags | O_CLOEXEC));
  if (!f.fd_.valid()) f.open_errno_ = errno;
  f.path_ = std::move(path);
  return f;
}

StatusOr<std::string> HeldFile::Read() const {
  if (!fd_.valid()) return ErrnoStatus("open " + path_, open_errno_);
  std::string out;
  char buf[4096];
  while (out.size() < (1u << 20)) {
    ssize_t n = ::pread(fd_.get(), buf, sizeof buf, static_cast<off_t>(out.size()));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("read " + path_, errno);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

StatusOr<uint64_t> HeldFile::ReadU64() const {
  // A number file is one record, made whole by a read from offset 0: a read
  // that leaves the buffer short has all of it, so one system call instead
  // of Read()'s second one to find the end (counters are read several times
  // per execution).
  if (!fd_.valid()) return ErrnoStatus("open " + path_, open_errno_);
  char buf[64];
  ssize_t n;
  do {
    n = ::pread(fd_.get(), buf, sizeof buf, 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return ErrnoStatus("read " + path_, errno);
  std::string text;
  if (static_cast<size_t>(n) < sizeof buf) {
    text.assign(buf, static_cast<size_t>(n));
  } else {
    ASSIGN_OR_RETURN(text, Read());
  }
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str()) return common::Internal("not a number in " + path_);
  return static_cast<uint64_t>(v);
}

std::optional<uint64_t> HeldFile::ReadU64Since(uint64_t base) const {
  auto v = ReadU64();
  if (!v.ok()) return std::nullopt;
  return *v > base ? *v - base : 0;
}

Status HeldFile::Write(std::string_view value) const {
  if (!fd_.valid()) return ErrnoStatus("open " + path_, open_errno_);
  ssize_t n = ::pwrite(fd_.get(), value.data(), value.size(), 0);
  if (n < 0) return ErrnoStatus("write '" + std::string(value) + "' to " + path_, errno);
  if (static_cast<size_t>(n) != value.size()) return common::Internal("short write to " + path_);
  return Status::Ok();
}

}  // namespace kiln::worker::sandbox
