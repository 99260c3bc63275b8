// kiln-worker: parses flags, loads the config, checks the sandbox and wires
// the parts together.
#include <sched.h>
#include <spdlog/spdlog.h>
#include <sys/signalfd.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <thread>
#include <vector>

#include "common/allocator_tuning.hpp"
#include "common/log/logging.hpp"
#include "common/stop_signals.hpp"
#include "common/thread_name.hpp"
#include "worker/config.hpp"
#include "worker/executor/executor.hpp"
#include "worker/executor/warm_pool.hpp"
#include "worker/metrics/worker_metrics.hpp"
#include "worker/runtimes/inventory.hpp"
#include "worker/worker_loop.hpp"

int main(int argc, char** argv) {
  using namespace kiln;
  common::ReturnFreedMemory();
  CLI::App app{"kiln-worker: runs Kiln jobs in sandboxes for every broker it connects to"};
  std::string config_file;
  std::vector<std::string> brokers;
  std::string id;
  app.add_option("-c,--config", config_file, "YAML config file (docs/configuration.md)")
      ->required();
  app.add_option("--broker", brokers,
                 "broker endpoint, e.g. tcp://127.0.0.1:5555 (repeatable; "
                 "replaces worker.brokers)");
  app.add_option("--id", id, "override worker.id");
  CLI11_PARSE(app, argc, argv);

  auto cfg = worker::LoadWorkerConfig(config_file);
  if (!cfg.ok()) {
    fprintf(stderr, "kiln-worker: %s\n", cfg.status().ToString().c_str());
    return 2;
  }
  if (!brokers.empty()) cfg->brokers = brokers;
  if (!id.empty()) {
    cfg->id = id;
  }
  if (cfg->brokers.empty()) {
    fprintf(stderr, "kiln-worker: no broker: set worker.brokers or pass --broker\n");
    return 2;
  }
  cfg->log.instance = cfg->id;
  if (auto st = common::InitLogging(cfg->log); !st.ok()) {
    fprintf(stderr, "kiln-worker: %s\n", st.ToString().c_str());
    return 2;
  }

  sigset_t stop_signals = common::BlockStopSignals();
  common::UniqueFd stop_fd(::signalfd(-1, &stop_signals, SFD_CLOEXEC | SFD_NONBLOCK));

  std::map<worker::runtimes::Language, worker::runtimes::Runtime> runtimes;
  for (const auto& name : cfg->runtimes) {
    auto lang = worker::runtimes::ParseLanguage(name);
    // Preloads are a zygote's (exec'd sandboxes import on first use), and
    // python jobs that import nothing beyond the standard library are served
    // by the zygote without them (Runtime::NeedsPreload).
    const bool zygotes = cfg->sandbox.zygote && cfg->sandbox.isolation == "standard";
    std::vector<std::string> preload = zygotes ? cfg->python_preload : std::vector<std::string>{};
    worker::runtimes::ModuleSet lean;
    if (*lang == worker::runtimes::Language::kPython && !preload.empty()) {
      lean = worker::runtimes::PythonStdlibModules(cfg->runtime_paths.python);
      if (lean.empty()) {
        spdlog::warn(
            "{} did not list its standard library: python jobs that import anything "
            "run in the preloaded zygote",
            cfg->runtime_paths.python);
      }
    }
    auto rt = worker::runtimes::Runtime::Create(*lang, cfg->runtime_paths, std::move(preload),
                                                std::move(lean));
    if (!rt.ok()) {
      spdlog::critical("runtime {}: {}", name, rt.status().ToString());
      return 2;
    }
    runtimes.emplace(*lang, std::move(*rt));
  }

  auto sandbox = worker::sandbox::Sandbox::Create(cfg->sandbox);
  if (!sandbox.ok()) {
    spdlog::critical("the sandbox cannot run on this host: {}", sandbox.status().ToString());
    return 3;
  }
  auto layers = (*sandbox)->ActiveLayers();
  // What the brokers list in GET /v1/runtimes: versions and package sets.
  auto offer = worker::runtimes::TakeInventory(runtimes, cfg->sandbox.node_modules);
  for (const auto& [language, version] : offer.versions) {
    if (version.empty())
      spdlog::warn("runtime {}: its interpreter did not say its version", language);
  }
  spdlog::info("package sets: {} packages over [{}]", offer.packages.size(),
               fmt::join(cfg->runtimes, ","));

  auto metrics = worker::WorkerMetrics::Create(cfg->metrics_listen, cfg->slots);
  if (!metrics.ok()) {
    spdlog::critical("{}", metrics.status().ToString());
    return 2;
  }
  if (cfg->metrics_endpoint.empty()) cfg->metrics_endpoint = (*metrics)->endpoint();
  if (!cfg->metrics_listen.empty()) {
    spdlog::info("metrics on http://{}/metrics", (*metrics)->endpoint());
  }

  // Warm sandboxes start with the worker's ceilings; each job tightens them.
  worker::sandbox::SandboxLimits launch;
  launch.memory_bytes = cfg->max_memory_mb << 20;
  launch.cpu_ms = cfg->max_timeout_ms;
  launch.max_pids = 1024;
  worker::WarmPool pool(sandbox->get(), std::move(runtimes), launch, cfg->warm_per_runtime,
                        metrics->get());
  worker::EventQueue events;
  worker::RunOptions run_options;
  run_options.worker_id = cfg->id;
  run_options.max_memory_mb = cfg->max_memory_mb;
  run_options.max_timeout_ms = cfg->max_timeout_ms;
  run_options.max_output_bytes = cfg->max_output_bytes;
  run_options.max_collect_bytes = cfg->max_collect_bytes;
  run_options.interrupt_grace = std::chrono::milliseconds(cfg->session_interrupt_grace_ms);
  run_options.session_stop_after = std::chrono::milliseconds(cfg->session_stop_after_ms);
  // With one CPU the polling thread would only take it from the sandbox.
  if (cpu_set_t cpus; ::sched_getaffinity(0, sizeof(cpus), &cpus) == 0 && CPU_COUNT(&cpus) >= 2) {
    run_options.busy_poll.window = std::chrono::microseconds(cfg->busy_poll_us);
  }
  run_options.idle_sessions = {.worker_bytes = cfg->idle_session_memory_mb << 20,
                               .tenant_bytes = cfg->idle_session_memory_per_tenant_mb << 20};
  zmq::context_t ctx(1);
  {
    worker::WorkerMetrics* worker_metrics = metrics->get();
    worker::PackageCache packages(
        cfg->packages_install,
        [worker_metrics](const std::string& language, const std::string& outcome, double ms) {
          if (worker_metrics != nullptr) worker_metrics->PackageSet(language, outcome, ms);
        });
    // Network on request (worker/egress/): one gateway thread for every job.
    std::unique_ptr<worker::EgressGateway> egress;
    if (cfg->egress.enabled) {
      auto gateway = worker::EgressGateway::Create(cfg->egress);
      if (!gateway.ok()) {
        spdlog::error("network.egress: {}", gateway.status().ToString());
        return 2;
      }
      egress = std::move(*gateway);
    }
    worker::Executor executor(run_options, cfg->slots, &pool, &events, metrics->get(), &packages,
                              egress.get());
    std::jthread refill([&](std::stop_token st) {
      common::NameThisThread("kiln-pool-fill");
      pool.Run(st);
    });
    spdlog::info("worker {} ready: {} slots, runtimes [{}], sandbox layers [{}], brokers [{}]",
                 cfg->id, cfg->slots, fmt::join(cfg->runtimes, ","), fmt::join(layers, ","),
                 fmt::join(cfg->brokers, ","));
    worker::WorkerLoop loop(*cfg, &ctx, &executor, &events, layers, std::move(offer),
                            metrics->get());
    loop.Run(stop_fd.get());
    refill.request_stop();
  }
  spdlog::info("worker {} stopped", cfg->id);
  return 0;
}
