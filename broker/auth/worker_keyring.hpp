// WorkerKeyring: the CURVE public keys of the workers a broker accepts, read
// from a directory of `<worker-id>.pub` files and re-read when it changes,
// so keys are added and revoked without a restart.
//
//   WorkerKeyring ring("/etc/kiln/worker-keys");
//   ring.Refresh();                                      // the ZAP thread, every second
//   std::optional<std::string> id = ring.WorkerOf(z85);  // any thread
//   if (ring.generation() != seen) { ... re-check ... }  // the set changed
//
// A key's file name is the only worker id it may register as. A file that is
// not a well-formed key, and a key that two files hold, are skipped and
// logged (the duplicate under both names: neither may claim the other's jobs).
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace kiln::broker {

class WorkerKeyring {
 public:
  explicit WorkerKeyring(std::string dir) : dir_(std::move(dir)) {}

  const std::string& dir() const { return dir_; }
  // Re-reads the directory when a file in it was added, removed or changed
  // since the last call. True when the accepted set changed.
  bool Refresh();
  // The worker id `public_z85` may register as; nullopt: not accepted.
  std::optional<std::string> WorkerOf(std::string_view public_z85) const;
  // Bumped each time the accepted set changes.
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
  size_t size() const;
  // How many times Refresh read the directory (its thread; for tests).
  uint64_t scans() const { return scans_; }

 private:
  using Keys = std::unordered_map<std::string, std::string>;  // public key -> worker id

  const std::string dir_;
  std::string signature_;  // names, sizes and mtimes seen by the last Refresh (its thread)
  uint64_t scans_ = 0;     // Refresh's thread
  mutable std::mutex mu_;
  std::shared_ptr<const Keys> keys_ = std::make_shared<Keys>();
  std::atomic<uint64_t> generation_{0};
};

}  // namespace kiln::broker
