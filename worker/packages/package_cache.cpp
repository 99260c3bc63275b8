#include "worker/packages/package_cache.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <random>

#include "common/audit/sha256.hpp"
#include "common/log/logging.hpp"
#include "common/package_spec.hpp"
#include "worker/packages/installer.hpp"

namespace kiln::worker {
namespace {

namespace fs = std::filesystem;
using common::Status;

const common::SubsystemLog kLog("packages");

bool Readable(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & POLLIN);
}

Status MakeDir(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) return common::Internal("packages: cannot create " + path + ": " + ec.message());
  ::chmod(path.c_str(), 0755);
  return Status::Ok();
}

void RemoveTree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) kLog.Warn({}, "could not remove {}: {}", path, ec.message());
}

std::string RandomSuffix() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[17];
  snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

}  // namespace

class PackageCache::Lease final : public PackageSet {
 public:
  Lease(PackageCache* cache, std::string path) : cache_(cache), path_(std::move(path)) {}
  ~Lease() override { cache_->Release(path_); }
  const std::string& path() const override { return path_; }

 private:
  PackageCache* cache_;
  std::string path_;
};

PackageCache::PackageCache(PackageInstallConfig config, Observer observer)
    : config_(std::move(config)), observer_(std::move(observer)) {
  // The folder is this worker's own: staging left by an install that died
  // with an earlier run of it is garbage.
  std::error_code ec;
  for (const auto& tenant : fs::directory_iterator(config_.cache_dir, ec)) {
    std::error_code inner;
    for (const auto& d : fs::directory_iterator(tenant.path(), inner)) {
      if (d.path().filename().string().rfind(".staging-", 0) == 0) RemoveTree(d.path().string());
    }
  }
}

common::StatusOr<std::shared_ptr<const PackageSet>> PackageCache::Acquire(
    const std::string& tenant, const std::string& language, const std::vector<std::string>& specs,
    int cancel_fd) {
  std::string outcome = "failed";
  double install_ms = 0;
  auto set = Resolve(tenant, language, specs, cancel_fd, &outcome, &install_ms);
  if (!set.ok() && set.status().code() == common::Code::kCancelled) outcome = "cancelled";
  if (observer_ && common::TakesPackages(language)) observer_(language, outcome, install_ms);
  return set;
}

common::StatusOr<std::shared_ptr<const PackageSet>> PackageCache::Resolve(
    const std::string& tenant, const std::string& language, const std::vector<std::string>& specs,
    int cancel_fd, std::string* outcome, double* install_ms) {
  RETURN_IF_ERROR(common::ValidatePackageSpecs(language, specs));
  // The set is named by what decides its content: the index and the specs
  // (sorted, so the order a job lists them in does not matter).
  std::vector<std::string> sorted = specs;
  std::sort(sorted.begin(), sorted.end());
  common::Sha256 h;
  h.Update(language == "python" ? config_.python_index : config_.npm_registry);
  for (const auto& s : sorted) {
    h.Update("\n");
    h.Update(s);
  }
  const std::string tenant_dir = config_.cache_dir + "/" + common::Sha256Hex(tenant).substr(0, 32);
  const std::string path = tenant_dir + "/" + language + "-" + h.FinishHex().substr(0, 32);

  std::unique_lock lock(mu_);
  while (entries_[path].installing) {
    // Another job installs this very set: wait for it (or for a cancel).
    installed_.wait_for(lock, std::chrono::milliseconds(100));
    if (Readable(cancel_fd)) {
      if (const Entry& e = entries_[path]; e.holders == 0 && !e.installing) entries_.erase(path);
      return Status(common::Code::kCancelled, "cancelled while waiting for packages");
    }
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    ++entries_[path].holders;
    ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // last used: now (eviction order)
    *outcome = "cached";
    return std::shared_ptr<const PackageSet>(std::make_shared<Lease>(this, path));
  }
  entries_[path].installing = true;
  lock.unlock();
  const auto start = std::chrono::steady_clock::now();
  Status installed = Install(language, sorted, tenant_dir, path, cancel_fd);
  *install_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  lock.lock();
  Entry& entry = entries_[path];
  entry.installing = false;
  installed_.notify_all();
  if (!installed.ok()) {
    if (entry.holders == 0) entries_.erase(path);
    return installed;
  }
  ++entry.holders;
  EvictLocked(tenant_dir);
  kLog.Info({.tenant = tenant}, "installed {} {} package(s) in {:.0f} ms", sorted.size(), language,
            *install_ms);
  *outcome = "installed";
  return std::shared_ptr<const PackageSet>(std::make_shared<Lease>(this, path));
}

Status PackageCache::Install(const std::string& language, const std::vector<std::string>& specs,
                             const std::string& tenant_dir, const std::string& path,
                             int cancel_fd) {
  RETURN_IF_ERROR(MakeDir(tenant_dir));
  const std::string staging = tenant_dir + "/.staging-" + RandomSuffix();
  if (::mkdir(staging.c_str(), 0755) != 0) {
    return common::ErrnoStatus("packages: staging folder " + staging, errno);
  }
  Status ran = ::chown(staging.c_str(), config_.uid, config_.gid) == 0
                   ? RunInstaller(config_, language, specs, staging, cancel_fd)
                   : common::ErrnoStatus("packages: chown " + staging, errno);
  if (ran.ok() && ::rename(staging.c_str(), path.c_str()) != 0 && errno != EEXIST &&
      errno != ENOTEMPTY) {
    ran = common::ErrnoStatus("packages: rename", errno);
  }
  // Still there when the install failed (or the set was already in place).
  if (::access(staging.c_str(), F_OK) == 0) RemoveTree(staging);
  return ran;
}

void PackageCache::Release(const std::string& path) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(path);
  if (it == entries_.end()) return;
  if (it->second.holders > 0) --it->second.holders;
  if (it->second.holders == 0 && !it->second.installing) entries_.erase(it);
}

void PackageCache::EvictLocked(const std::string& tenant_dir) {
  struct Set {
    std::string path;
    int64_t mtime;
  };
  std::vector<Set> sets;
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(tenant_dir, ec)) {
    const std::string name = d.path().filename().string();
    if (name.empty() || name[0] == '.') continue;  // staging folders
    struct stat st {};
    if (::lstat(d.path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    sets.push_back({d.path().string(),
                    static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec});
  }
  if (sets.size() <= config_.max_sets_per_tenant) return;
  std::sort(sets.begin(), sets.end(), [](const Set& a, const Set& b) { return a.mtime < b.mtime; });
  size_t excess = sets.size() - config_.max_sets_per_tenant;
  for (const auto& s : sets) {
    if (excess == 0) break;
    auto it = entries_.find(s.path);
    if (it != entries_.end() && (it->second.holders > 0 || it->second.installing)) continue;
    RemoveTree(s.path);
    --excess;
  }
}

}  // namespace kiln::worker
