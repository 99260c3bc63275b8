#include "worker/metrics/worker_metrics.hpp"

#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <exception>

#include "common/metrics/metrics_common.hpp"
#include "worker/sandbox/cgroups.hpp"

namespace kiln::worker {
using common::SecondsBuckets;

common::StatusOr<std::unique_ptr<WorkerMetrics>> WorkerMetrics::Create(const std::string& listen,
                                                                       uint32_t slots) {
  std::unique_ptr<WorkerMetrics> m(new WorkerMetrics(slots));
  if (listen.empty()) return m;
  auto colon = listen.rfind(':');
  if (colon == std::string::npos || colon + 1 == listen.size()) {
    return common::InvalidRequest("worker.metrics_listen: expected host:port, got " + listen);
  }
  try {
    m->exposer_ = std::make_unique<prometheus::Exposer>(listen, /*num_threads=*/1);
  } catch (const std::exception& e) {
    return common::InvalidRequest("worker.metrics_listen: cannot listen on " + listen + ": " +
                                  e.what());
  }
  m->exposer_->RegisterCollectable(m->registry_);
  auto ports = m->exposer_->GetListeningPorts();
  const std::string port = ports.empty() ? listen.substr(colon + 1) : std::to_string(ports[0]);
  m->endpoint_ = listen.substr(0, colon) + ":" + port;
  return m;
}

WorkerMetrics::WorkerMetrics(uint32_t slots) : registry_(std::make_shared<prometheus::Registry>()) {
  auto& r = *registry_;
  sessions_ = &prometheus::BuildGauge()
                   .Name("kiln_worker_sessions")
                   .Help("Session sandboxes alive on this worker")
                   .Register(r)
                   .Add({});
  running_ = &prometheus::BuildGauge()
                  .Name("kiln_worker_jobs_running")
                  .Help("Jobs holding a slot on this worker")
                  .Register(r)
                  .Add({});
  finished_ = &prometheus::BuildCounter()
                   .Name("kiln_worker_jobs_finished_total")
                   .Help("Jobs this worker ended, by language and end reason")
                   .Register(r);
  sandbox_start_ = &prometheus::BuildHistogram()
                        .Name("kiln_worker_sandbox_start_seconds")
                        .Help(
                            "Time to start a sandbox with its interpreter (birth: exec, or "
                            "zygote: forked, its contain steps still running)")
                        .Register(r);
  warm_ = &prometheus::BuildGauge()
               .Name("kiln_worker_warm_sandboxes")
               .Help("Sandboxes started and waiting for a job")
               .Register(r);
  package_sets_ = &prometheus::BuildCounter()
                       .Name("kiln_worker_package_sets_total")
                       .Help(
                           "Package sets jobs asked for (packages on request), by language "
                           "and outcome: cached, installed, failed, cancelled")
                       .Register(r);
  package_install_ = &prometheus::BuildHistogram()
                          .Name("kiln_worker_package_install_seconds")
                          .Help(
                              "Time to install a package set (pip or npm), by language and "
                              "outcome: installed or failed")
                          .Register(r);
  sandbox_memory_family_ = &prometheus::BuildGauge()
                                .Name("kiln_worker_sandbox_memory_bytes")
                                .Help("Memory charged to this worker's sandboxes (cgroups)")
                                .Register(r);
  sandbox_cpu_family_ = &prometheus::BuildCounter()
                             .Name("kiln_worker_sandbox_cpu_seconds_total")
                             .Help("CPU time (user+system) used by this worker's sandboxes")
                             .Register(r);
  chunks_sent_ = &prometheus::BuildCounter()
                      .Name("kiln_worker_output_chunks_sent_total")
                      .Help("Output chunks sent to brokers (coalesced: up to 64 KiB or 20 ms each)")
                      .Register(r)
                      .Add({});
  chunk_bytes_sent_ = &prometheus::BuildCounter()
                           .Name("kiln_worker_output_chunk_bytes_sent_total")
                           .Help("Bytes of output sent to brokers in output chunks")
                           .Register(r)
                           .Add({});
  chunks_dropped_ = &prometheus::BuildCounter()
                         .Name("kiln_worker_output_chunks_dropped_total")
                         .Help(
                             "Output chunks dropped unsent past the bound of their job or of "
                             "the worker (the Result still carries the output)")
                         .Register(r);
  unsent_bytes_ = &prometheus::BuildGauge()
                       .Name("kiln_worker_output_unsent_bytes")
                       .Help("Bytes of output chunks waiting to be sent")
                       .Register(r)
                       .Add({});
  results_unacked_ = &prometheus::BuildGauge()
                          .Name("kiln_worker_results_unacked")
                          .Help("Results kept until a broker acknowledges them")
                          .Register(r)
                          .Add({});
  results_resent_ = &prometheus::BuildCounter()
                         .Name("kiln_worker_results_resent_total")
                         .Help(
                             "Results sent again: after a registration, or unacknowledged "
                             "too long")
                         .Register(r)
                         .Add({});
  idle_session_bytes_ = &prometheus::BuildGauge()
                             .Name("kiln_worker_idle_session_memory_bytes")
                             .Help("Memory held by idle (frozen) session sandboxes")
                             .Register(r)
                             .Add({});
  sessions_reclaimed_ = &prometheus::BuildCounter()
                             .Name("kiln_worker_sessions_reclaimed_total")
                             .Help(
                                 "Idle sessions destroyed to keep idle session memory within "
                                 "the worker's or a tenant's budget")
                             .Register(r)
                             .Add({});
  results_dropped_ = &prometheus::BuildCounter()
                          .Name("kiln_worker_results_dropped_total")
                          .Help("Results dropped unacknowledged past the worker's bound")
                          .Register(r)
                          .Add({});
  prometheus::BuildGauge()
      .Name("kiln_worker_slots")
      .Help("Concurrent job slots of this worker")
      .Register(r)
      .Add({})
      .Set(slots);
  common::RegisterBuildInfo(r);
}

WorkerMetrics::~WorkerMetrics() = default;

void WorkerMetrics::SetRunning(size_t jobs) { running_->Set(static_cast<double>(jobs)); }

void WorkerMetrics::SetSessions(size_t sessions) { sessions_->Set(static_cast<double>(sessions)); }

void WorkerMetrics::SetIdleSessionMemory(uint64_t bytes) {
  idle_session_bytes_->Set(static_cast<double>(bytes));
}

void WorkerMetrics::SessionsReclaimed(size_t n) {
  sessions_reclaimed_->Increment(static_cast<double>(n));
}

void WorkerMetrics::JobFinished(const std::string& language, const std::string& reason) {
  finished_->Add({{"language", language}, {"reason", reason}}).Increment();
}

void WorkerMetrics::SandboxStarted(const std::string& language, double spawn_ms,
                                   const std::string& birth) {
  sandbox_start_->Add({{"language", language}, {"birth", birth}}, SecondsBuckets())
      .Observe(spawn_ms / 1000.0);
}

void WorkerMetrics::PackageSet(const std::string& language, const std::string& outcome,
                               double install_ms) {
  package_sets_->Add({{"language", language}, {"outcome", outcome}}).Increment();
  if (outcome == "installed" || outcome == "failed") {
    package_install_->Add({{"language", language}, {"outcome", outcome}}, SecondsBuckets())
        .Observe(install_ms / 1000.0);
  }
}

void WorkerMetrics::SetWarm(const std::string& language, size_t ready) {
  warm_->Add({{"language", language}}).Set(static_cast<double>(ready));
}

void WorkerMetrics::SetCgroupUsage(const sandbox::CgroupUsage& usage) {
  std::lock_guard lock(usage_mu_);
  if (usage.memory_bytes) {
    if (sandbox_memory_ == nullptr) sandbox_memory_ = &sandbox_memory_family_->Add({});
    sandbox_memory_->Set(static_cast<double>(*usage.memory_bytes));
  }
  if (usage.cpu_seconds) {
    if (sandbox_cpu_ == nullptr) sandbox_cpu_ = &sandbox_cpu_family_->Add({});
    // The first reading counts all the prefix used so far (normally since
    // this worker created it). A drop means the cgroup was made anew: it
    // becomes the new baseline, as a counter never goes down.
    if (*usage.cpu_seconds > last_cpu_seconds_)
      sandbox_cpu_->Increment(*usage.cpu_seconds - last_cpu_seconds_);
    last_cpu_seconds_ = *usage.cpu_seconds;
  }
}

void WorkerMetrics::OutputChunkSent(size_t bytes) {
  chunks_sent_->Increment();
  chunk_bytes_sent_->Increment(static_cast<double>(bytes));
}

void WorkerMetrics::OutputChunkDropped(const char* bound) {
  chunks_dropped_->Add({{"bound", bound}}).Increment();
}

void WorkerMetrics::SetOutputUnsentBytes(size_t bytes) {
  unsent_bytes_->Set(static_cast<double>(bytes));
}

void WorkerMetrics::SetResultsUnacked(size_t results) {
  results_unacked_->Set(static_cast<double>(results));
}

void WorkerMetrics::ResultResent() { results_resent_->Increment(); }

void WorkerMetrics::ResultDropped() { results_dropped_->Increment(); }

}  // namespace kiln::worker
