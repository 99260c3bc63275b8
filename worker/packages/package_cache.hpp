// PackageCache: a worker's packages on request (docs/runtimes.md, "Packages
// on request"). A job's `packages` are installed once per tenant into a set
// folder on the host, which every later job of that tenant asking for the
// same set reuses, mounted read-only at /packages in its sandbox.
//
//   PackageCache cache(config.packages_install);
//   ASSIGN_OR_RETURN(auto set, cache.Acquire(job.tenant, "python", job.packages, cancel_fd));
//   RETURN_IF_ERROR(sandbox->MountPackages(set->path()));   // hold `set` while it runs
//
// Layout: <cache_dir>/<sha256(tenant)>/<language>-<sha256(index, specs)>.
// An install runs in a staging folder (installer.hpp) that is renamed into
// place whole, so a set folder exists only complete. Sets held by a lease are
// never removed; past `max_sets_per_tenant` a tenant's least recently used
// unheld sets go. Thread-safe: job threads call Acquire concurrently; one
// install runs per set, the others asking for it wait for it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.hpp"

namespace kiln::worker {

struct PackageInstallConfig {
  // Where sets live on the host (created 0755, root's).
  std::string cache_dir = "/var/cache/kiln/packages";
  // The indexes the worker installs from; empty: that language takes no
  // packages on request (jobs asking end PACKAGE_INSTALL_FAILED).
  std::string python_index;                 // a PEP 503 "simple" index URL (pip --index-url)
  std::string npm_registry;                 // an npm registry URL (npm --registry)
  std::string python = "/usr/bin/python3";  // runs `-m pip`
  std::string npm = "/usr/bin/npm";
  uint64_t timeout_ms = 60'000;           // one install, at most protocol::kMaxPackageInstallMs
  uint64_t max_set_bytes = 512ull << 20;  // a set's files together
  uint32_t max_sets_per_tenant = 16;
  // The unprivileged ids the installer runs as (no sandbox uid's).
  uint32_t uid = 65534;
  uint32_t gid = 65534;
};

// A set in use: its folder stays until every holder has let go.
class PackageSet {
 public:
  virtual ~PackageSet() = default;
  virtual const std::string& path() const = 0;  // the set folder on the host
};

class PackageCache {
 public:
  // Told of every Acquire's outcome: "cached", "installed", "failed" or
  // "cancelled", with the install's duration (0 when none ran). Called on
  // the job's thread, without locks held.
  using Observer = std::function<void(const std::string& language, const std::string& outcome,
                                      double install_ms)>;
  explicit PackageCache(PackageInstallConfig config, Observer observer = nullptr);
  PackageCache(const PackageCache&) = delete;
  PackageCache& operator=(const PackageCache&) = delete;

  // The set of `specs` (validated again here: common/package_spec.hpp) for
  // the tenant, installed first if it is not there yet. Blocks for the
  // install (or another thread's install of the same set); a readable
  // `cancel_fd` ends the wait with CANCELLED. PACKAGE_INSTALL_FAILED says
  // why an install failed (the installer's own error lines, the timeout,
  // the size cap); INVALID_REQUEST for specs that do not parse.
  common::StatusOr<std::shared_ptr<const PackageSet>> Acquire(const std::string& tenant,
                                                              const std::string& language,
                                                              const std::vector<std::string>& specs,
                                                              int cancel_fd);

  const PackageInstallConfig& config() const { return config_; }

 private:
  class Lease;
  struct Entry {
    uint32_t holders = 0;
    bool installing = false;
  };
  // Acquire's work; `outcome` and `install_ms` say what happened.
  common::StatusOr<std::shared_ptr<const PackageSet>> Resolve(const std::string& tenant,
                                                              const std::string& language,
                                                              const std::vector<std::string>& specs,
                                                              int cancel_fd, std::string* outcome,
                                                              double* install_ms);
  // Installs into a staging folder of the tenant and renames it to `path`.
  common::Status Install(const std::string& language, const std::vector<std::string>& specs,
                         const std::string& tenant_dir, const std::string& path, int cancel_fd);
  void Release(const std::string& path);
  // Removes the tenant's least recently used unheld sets past the cap. Holds mu_.
  void EvictLocked(const std::string& tenant_dir);

  const PackageInstallConfig config_;
  const Observer observer_;
  std::mutex mu_;
  std::condition_variable installed_;
  std::map<std::string, Entry> entries_;  // by set folder
};

}  // namespace kiln::worker
