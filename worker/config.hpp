// WorkerConfig: everything kiln-worker reads from its YAML file, with defaults.
//
//   ASSIGN_OR_RETURN(WorkerConfig cfg, LoadWorkerConfig("/etc/kiln/worker.yaml"));
//
// docs/configuration.md documents every key. Unknown keys and bad values are
// refused with a message naming the key. Plain data; any thread after load.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/log/log_options.hpp"
#include "common/status.hpp"
#include "worker/egress/egress_gateway.hpp"
#include "worker/packages/package_cache.hpp"
#include "worker/runtimes/runtime.hpp"
#include "worker/sandbox/sandbox.hpp"

namespace kiln::worker {

// The worker's log subsystems, each with its own level under log.levels
// (docs/operations.md, "Logs").
inline common::LogOptions DefaultLogOptions() {
  common::LogOptions o;
  o.component = "worker";
  o.subsystems = {"link", "jobs", "sessions", "pool", "packages", "sandbox", "gvisor", "egress"};
  return o;
}

struct WorkerConfig {
  std::string id;                    // default: <hostname>-<pid>
  std::vector<std::string> brokers;  // ZeroMQ endpoints of every broker
  uint32_t slots = 4;                // concurrent one-shot jobs
  uint32_t warm_per_runtime = 1;     // sandboxes kept ready per runtime
  uint32_t heartbeat_interval_ms = 1000;
  uint32_t heartbeat_liveness = 3;
  std::vector<std::string> runtimes = {"python", "javascript", "shell"};
  runtimes::RuntimePaths runtime_paths;
  // Per-job ceilings the worker enforces whatever a broker asks.
  uint64_t max_memory_mb = 4096;
  uint64_t max_timeout_ms = 3600'000;
  uint64_t max_output_bytes = 16u << 20;
  uint64_t max_collect_bytes = 10u << 20;
  uint32_t drain_timeout_ms = 60'000;  // SIGTERM waits this long for running jobs
  // A session execution past its timeout is interrupted; if it has not
  // stopped this much later, the session's sandbox is destroyed.
  uint32_t session_interrupt_grace_ms = 2000;
  // An execution that starts on a calm worker has its thread poll its
  // sandbox without sleeping for up to this long (worker/executor/busy_poll.hpp).
  // 0: never.
  uint32_t busy_poll_us = 2000;
  // A session stays running this long after an execution before it is
  // stopped (SessionTable::Rest); what runs meanwhile counts to its next
  // execution. 0: stopped at once.
  uint32_t session_stop_after_ms = 10;
  // Memory idle (frozen) sessions may hold on this worker, in all and per
  // tenant; past it the least recently used are destroyed. 0: no bound.
  uint64_t idle_session_memory_mb = 4096;
  uint64_t idle_session_memory_per_tenant_mb = 2048;
  std::string metrics_endpoint;  // reported to brokers; empty when none
  std::string metrics_listen;    // host:port of GET /metrics; empty: off
  // CURVE (docs/security.md, "Worker links"): worker.secret_key_file and
  // worker.broker_key_file, both or neither; the keys as read (Z85).
  std::string secret_key_file;
  std::string broker_key_file;
  std::string curve_public;
  std::string curve_secret;
  std::string curve_broker_public;
  sandbox::SandboxConfig sandbox;
  // packages.* (docs/runtimes.md, "Package sets"): the javascript tree is
  // sandbox.node_modules (default below); modules the python zygote imports
  // before it forks, so one-shot jobs find them loaded. Missing ones are
  // skipped with a warning.
  std::vector<std::string> python_preload = {"numpy", "pandas"};
  // packages.install (docs/runtimes.md, "Packages on request"): where jobs'
  // `packages` come from and where they are kept; cache_dir defaults to
  // /var/cache/kiln/packages/<worker id> (workers never share one: each
  // evicts only what it knows unused).
  PackageInstallConfig packages_install;
  // network.egress (docs/configuration.md): the egress gateway serving jobs
  // with network on request (worker/egress/).
  EgressConfig egress;
  // Logging (log.level, log.format, log.levels per subsystem).
  common::LogOptions log = DefaultLogOptions();
};

common::StatusOr<WorkerConfig> LoadWorkerConfig(const std::string& file);

}  // namespace kiln::worker
