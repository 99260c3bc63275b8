#include "common/curve/curve_keys.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <cstdint>
#include <sstream>

#include "common/unique_fd.hpp"

namespace kiln::common {
namespace {

StatusOr<std::string> ReadSmallFile(const std::string& path, struct stat* st) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) return ErrnoStatus("open " + path, errno);
  if (::fstat(fd.get(), st) != 0) return ErrnoStatus("stat " + path, errno);
  if (!S_ISREG(st->st_mode)) return InvalidRequest(path + ": not a regular file");
  if (st->st_size > 4096) return InvalidRequest(path + ": too large for a key file");
  std::string text(static_cast<size_t>(st->st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("read " + path, errno);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  return text;
}

Status WriteNew(const std::string& path, const std::string& text, mode_t mode) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode));
  if (!fd.valid()) return ErrnoStatus("create " + path, errno);
  // The umask may have taken bits away; the mode is what the file must have.
  if (::fchmod(fd.get(), mode) != 0) return ErrnoStatus("chmod " + path, errno);
  size_t put = 0;
  while (put < text.size()) {
    ssize_t n = ::write(fd.get(), text.data() + put, text.size() - put);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("write " + path, errno);
    put += static_cast<size_t>(n);
  }
  if (::fsync(fd.get()) != 0) return ErrnoStatus("fsync " + path, errno);
  return Status::Ok();
}

}  // namespace

StatusOr<CurveKeyPair> GenerateCurveKeyPair() {
  char pub[kCurveKeyZ85Chars + 1] = {};
  char sec[kCurveKeyZ85Chars + 1] = {};
  if (::zmq_curve_keypair(pub, sec) != 0) {
    return Internal(std::string("cannot generate a CURVE key pair: ") + zmq_strerror(zmq_errno()));
  }
  return CurveKeyPair{pub, sec};
}

bool IsCurveKey(std::string_view z85) {
  if (z85.size() != kCurveKeyZ85Chars) return false;
  const std::string text(z85);
  uint8_t raw[32];
  return ::zmq_z85_decode(raw, text.c_str()) != nullptr;
}

bool IsCurveKeyName(std::string_view name) {
  if (name.empty() || name.size() > 128 || name.front() == '.') return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

StatusOr<std::string> ParseCurveKeyText(std::string_view text, std::string_view what) {
  std::string key;
  std::istringstream in{std::string(text)};
  for (std::string line; std::getline(in, line);) {
    const size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] == '#') continue;
    const size_t e = line.find_last_not_of(" \t\r");
    std::string_view candidate = std::string_view(line).substr(b, e - b + 1);
    if (!key.empty()) return InvalidRequest(std::string(what) + ": holds more than one key");
    if (!IsCurveKey(candidate)) {
      return InvalidRequest(std::string(what) + ": not a CURVE key (40 Z85 characters expected)");
    }
    key = std::string(candidate);
  }
  if (key.empty()) return InvalidRequest(std::string(what) + ": holds no key");
  return key;
}

StatusOr<std::string> ReadCurvePublicKeyFile(const std::string& path) {
  struct stat st {};
  ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path, &st));
  return ParseCurveKeyText(text, path);
}

StatusOr<CurveKeyPair> ReadCurveSecretKeyFile(const std::string& path) {
  struct stat st {};
  ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path, &st));
  if ((st.st_mode & 077) != 0) {
    return InvalidRequest(path +
                          ": a secret key file must not be open to group or others (chmod 600)");
  }
  ASSIGN_OR_RETURN(std::string secret, ParseCurveKeyText(text, path));
  char pub[kCurveKeyZ85Chars + 1] = {};
  if (::zmq_curve_public(pub, secret.c_str()) != 0) {
    return InvalidRequest(path + ": cannot derive the public key: " + zmq_strerror(zmq_errno()));
  }
  return CurveKeyPair{pub, std::move(secret)};
}

Status WriteCurveKeyFiles(const std::string& dir, const std::string& name,
                          const CurveKeyPair& keys) {
  if (!IsCurveKeyName(name)) {
    return InvalidRequest("key name '" + name + "': use letters, digits, '.', '_' and '-'");
  }
  const std::string base = dir + "/" + name;
  RETURN_IF_ERROR(WriteNew(
      base + ".key",
      "# CURVE secret key of " + name + ": keep it private\n" + keys.secret_z85 + "\n", 0600));
  return WriteNew(base + ".pub", "# CURVE public key of " + name + "\n" + keys.public_z85 + "\n",
                  0644);
}

}  // namespace kiln::common
