// CURVE key files: how Kiln writes, reads and checks the ZeroMQ CURVE keys
// that authenticate workers to brokers (docs/security.md, "Worker links").
//
//   ASSIGN_OR_RETURN(CurveKeyPair kp, GenerateCurveKeyPair());
//   RETURN_IF_ERROR(WriteCurveKeyFiles("/etc/kiln/keys", "w1", kp));  // w1.key, w1.pub
//   ASSIGN_OR_RETURN(CurveKeyPair mine, ReadCurveSecretKeyFile("/etc/kiln/keys/w1.key"));
//   ASSIGN_OR_RETURN(std::string broker, ReadCurvePublicKeyFile("/etc/kiln/keys/broker.pub"));
//
// A key file holds one key as 40 Z85 characters on a line of its own; lines
// starting with '#' are comments. `<name>.key` holds the secret key (the
// public one is derived from it) and must not be readable by group or
// others; `<name>.pub` holds the public key. A worker key's name is the id
// the worker registers with. Pure functions over files; any thread.
#pragma once

#include <string>
#include <string_view>

#include "common/status.hpp"

namespace kiln::common {

inline constexpr size_t kCurveKeyZ85Chars = 40;

struct CurveKeyPair {
  std::string public_z85;
  std::string secret_z85;
};

// A fresh key pair from libzmq (libsodium's randomness).
StatusOr<CurveKeyPair> GenerateCurveKeyPair();
// Whether `z85` is a well-formed key: 40 characters of the Z85 alphabet.
bool IsCurveKey(std::string_view z85);
// Key names (file stems, worker ids): [A-Za-z0-9._-], 1 to 128 characters,
// not starting with '.'.
bool IsCurveKeyName(std::string_view name);
// The key in a file's text (comments and blank lines skipped); INVALID_REQUEST
// naming `what` when there is not exactly one well-formed key.
StatusOr<std::string> ParseCurveKeyText(std::string_view text, std::string_view what);

StatusOr<std::string> ReadCurvePublicKeyFile(const std::string& path);
// Refuses a file that group or others may read or write.
StatusOr<CurveKeyPair> ReadCurveSecretKeyFile(const std::string& path);
// Writes <dir>/<name>.key (mode 0600) and <dir>/<name>.pub (0644); refuses
// to overwrite either.
Status WriteCurveKeyFiles(const std::string& dir, const std::string& name,
                          const CurveKeyPair& keys);

}  // namespace kiln::common
