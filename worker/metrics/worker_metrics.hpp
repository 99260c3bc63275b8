// WorkerMetrics: the worker's Prometheus metrics (docs/architecture.md,
// "Metrics"), served on worker.metrics_listen when it is set.
//
//   ASSIGN_OR_RETURN(auto metrics, WorkerMetrics::Create("127.0.0.1:9102", slots));
//   metrics->JobFinished("python", "exit");
//
// With an empty listen address nothing is served (prometheus-cpp's Exposer
// takes ~2 s to stop, so it only exists when asked for); the metrics still
// count. Labels are bounded: language, end reason and drop bound only. Every method is
// thread-safe: job threads, the warm pool's refill thread and the event loop
// update it concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "common/status.hpp"

namespace prometheus {
class Exposer;
class Registry;
class Counter;
class Gauge;
class Histogram;
template <typename T>
class Family;
}  // namespace prometheus

namespace kiln::worker {

namespace sandbox {
struct CgroupUsage;
}

class WorkerMetrics {
 public:
  // INVALID_REQUEST when `listen` (host:port; port 0 picks one) cannot be bound.
  static common::StatusOr<std::unique_ptr<WorkerMetrics>> Create(const std::string& listen,
                                                                 uint32_t slots);
  ~WorkerMetrics();
  WorkerMetrics(const WorkerMetrics&) = delete;
  WorkerMetrics& operator=(const WorkerMetrics&) = delete;

  // host:port actually listened on; empty when not serving.
  const std::string& endpoint() const { return endpoint_; }

  void SetRunning(size_t jobs);
  // Session sandboxes alive on this worker.
  void SetSessions(size_t sessions);
  // Memory held by idle (frozen) sessions, and idle sessions destroyed to
  // keep it within the budget (SessionTable).
  void SetIdleSessionMemory(uint64_t bytes);
  void SessionsReclaimed(size_t n);
  // `reason` is protocol::EndReasonName of the job's Result.
  void JobFinished(const std::string& language, const std::string& reason);
  // birth: "zygote" (forked from the runtime's zygote) or "exec".
  void SandboxStarted(const std::string& language, double spawn_ms, const std::string& birth);
  void SetWarm(const std::string& language, size_t ready);
  // Packages on request (PackageCache): a set a job asked for, by outcome
  // ("cached": found installed, "installed", "failed", "cancelled"), and how
  // long installs took (outcome "installed" and "failed" only).
  void PackageSet(const std::string& language, const std::string& outcome, double install_ms);
  // The cgroup usage of all this worker's sandboxes (CgroupManager::Usage):
  // sets kiln_worker_sandbox_memory_bytes and adds the CPU used since the
  // previous reading to kiln_worker_sandbox_cpu_seconds_total. Each series
  // appears with the first reading that has its figure.
  void SetCgroupUsage(const sandbox::CgroupUsage& usage);

  // Outbound traffic (the event loop's Outbox): output chunks handed to a
  // broker link and their bytes; chunks dropped past the unsent-bytes bound
  // of their job or of the worker (`bound` is "job" or "total"); bytes of
  // chunks waiting to be sent.
  void OutputChunkSent(size_t bytes);
  void OutputChunkDropped(const char* bound);
  void SetOutputUnsentBytes(size_t bytes);
  // Results kept until a broker acknowledges them; sent again (after a
  // registration or a timeout); dropped unacknowledged past the bound.
  void SetResultsUnacked(size_t results);
  void ResultResent();
  void ResultDropped();

 private:
  explicit WorkerMetrics(uint32_t slots);

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::string endpoint_;
  prometheus::Gauge* running_;
  prometheus::Gauge* sessions_;
  prometheus::Gauge* idle_session_bytes_;
  prometheus::Counter* sessions_reclaimed_;
  prometheus::Family<prometheus::Counter>* finished_;
  prometheus::Family<prometheus::Histogram>* sandbox_start_;
  prometheus::Family<prometheus::Gauge>* warm_;
  prometheus::Family<prometheus::Counter>* package_sets_;
  prometheus::Family<prometheus::Histogram>* package_install_;
  prometheus::Family<prometheus::Gauge>* sandbox_memory_family_;
  prometheus::Family<prometheus::Counter>* sandbox_cpu_family_;
  prometheus::Counter* chunks_sent_;
  prometheus::Counter* chunk_bytes_sent_;
  prometheus::Family<prometheus::Counter>* chunks_dropped_;
  prometheus::Gauge* unsent_bytes_;
  prometheus::Gauge* results_unacked_;
  prometheus::Counter* results_resent_;
  prometheus::Counter* results_dropped_;

  std::mutex usage_mu_;                          // guards the three below
  prometheus::Gauge* sandbox_memory_ = nullptr;  // from the first reading on
  prometheus::Counter* sandbox_cpu_ = nullptr;
  double last_cpu_seconds_ = 0;  // the cgroup's counter at the previous reading
};

}  // namespace kiln::worker
