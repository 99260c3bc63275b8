#include "worker/sandbox/fs_util.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <sstream>

#include "common/unique_fd.hpp"

namespace kiln::worker::sandbox {

using common::ErrnoStatus;
using common::Status;
using common::StatusOr;
using common::UniqueFd;

Status WriteFileString(const std::string& path, std::string_view value) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus("open " + path, errno);
  ssize_t n = ::write(fd.get(), value.data(), value.size());
  if (n < 0) return ErrnoStatus("write '" + std::string(value) + "' to " + path, errno);
  if (static_cast<size_t>(n) != value.size()) return common::Internal("short write to " + path);
  return Status::Ok();
}

StatusOr<std::string> ReadFileString(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus("open " + path, errno);
  std::string out;
  char buf[4096];
  while (out.size() < (1u << 20)) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("read " + path, errno);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

StatusOr<uint64_t> ReadFileU64(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileString(path));
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str()) return common::Internal("not a number in " + path);
  return static_cast<uint64_t>(v);
}

std::optional<uint64_t> ParseKeyedU64(std::string_view text, std::string_view key) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    if (line.size() > key.size() && line.substr(0, key.size()) == key && line[key.size()] == ' ') {
      std::string num(line.substr(key.size() + 1));
      return std::strtoull(num.c_str(), nullptr, 10);
    }
    pos = eol + 1;
  }
  return std::nullopt;
}

bool PathExists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

Status MakeDirs(const std::string& path, mode_t mode) {
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') continue;
    std::string part = path.substr(0, pos);
    bool last = pos == path.size();
    if (::mkdir(part.c_str(), last ? mode : 0755) != 0 && errno != EEXIST) {
      return ErrnoStatus("mkdir " + part, errno);
    }
  }
  return Status::Ok();
}

namespace {
std::string Unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      int v = 0;
      bool ok = true;
      for (size_t j = 1; j <= 3; ++j) {
        if (i + j >= s.size() || s[i + j] < '0' || s[i + j] > '7') {
          ok = false;
          break;
        }
        v = v * 8 + (s[i + j] - '0');
      }
      if (ok) {
        out.push_back(static_cast<char>(v));
        i += 3;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}
}  // namespace

std::vector<MountInfo> ReadMountInfo() {
  std::vector<MountInfo> out;
  auto text = ReadFileString("/proc/self/mountinfo");
  if (!text.ok()) return out;
  std::istringstream lines(*text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream f(line);
    std::vector<std::string> fields;
    std::string w;
    while (f >> w) fields.push_back(w);
    size_t sep = 0;
    while (sep < fields.size() && fields[sep] != "-") ++sep;
    if (sep < 5 || sep + 2 >= fields.size()) continue;
    MountInfo m;
    m.mount_point = Unescape(fields[4]);
    m.fs_type = fields[sep + 1];
    m.super_options = sep + 3 < fields.size() ? fields[sep + 3] : "";
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace kiln::worker::sandbox
