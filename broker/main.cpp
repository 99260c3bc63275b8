// kiln-broker: parses flags, loads the config and wires the parts together.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <thread>

#include "broker/api/http_api.hpp"
#include "broker/config.hpp"
#include "broker/metrics/broker_metrics.hpp"
#include "broker/scheduler/dispatcher.hpp"
#include "broker/store/job_store.hpp"
#include "common/log/logging.hpp"
#include "common/stop_signals.hpp"

namespace {

int Fail(const kiln::common::Status& st) {
  spdlog::critical("{}", st.ToString());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kiln;
  CLI::App app{"kiln-broker: accepts execution jobs and dispatches them to Kiln workers"};
  std::string config_file;
  std::string http_listen, worker_endpoint, redis_url;
  app.add_option("-c,--config", config_file, "YAML config file (docs/configuration.md)")
      ->required();
  app.add_option("--http", http_listen, "override broker.http.listen (host:port)");
  app.add_option("--workers", worker_endpoint, "override broker.workers.endpoint");
  app.add_option("--redis", redis_url, "override broker.redis.url");
  CLI11_PARSE(app, argc, argv);

  auto cfg = broker::LoadBrokerConfig(config_file);
  if (!cfg.ok()) {
    fprintf(stderr, "kiln-broker: %s\n", cfg.status().ToString().c_str());
    return 2;
  }
  if (!http_listen.empty()) cfg->http_listen = http_listen;
  if (!worker_endpoint.empty()) cfg->worker_endpoint = worker_endpoint;
  if (!redis_url.empty()) cfg->redis_url = redis_url;
  if (auto st = common::InitLogging({"broker", cfg->log_level, cfg->log_format}); !st.ok()) {
    return Fail(st);
  }

  sigset_t stop_signals = common::BlockStopSignals();

  auto pool = broker::RedisPool::Create(cfg->redis_url, cfg->redis_pool_size);
  if (!pool.ok()) return Fail(pool.status());
  broker::JobStore store(pool->get(), cfg->job_ttl_s);
  if (auto st = store.Ping(); !st.ok()) return Fail(st.WithContext("redis " + cfg->redis_url));

  zmq::context_t zmq_ctx(1);
  broker::JobWaiters waiters;
  broker::BrokerMetrics metrics;
  broker::DispatcherOptions dopts{cfg->id, cfg->worker_endpoint,
                                  std::chrono::milliseconds(cfg->heartbeat_interval_ms),
                                  cfg->heartbeat_liveness, cfg->max_queue};
  for (const auto& t : cfg->tenants) {
    if (!t.secrets.empty()) dopts.tenant_secrets[t.name] = t.secrets;
  }
  dopts.metrics = &metrics;
  auto dispatcher = broker::Dispatcher::Create(dopts, &zmq_ctx, &store, &waiters);
  if (!dispatcher.ok()) return Fail(dispatcher.status());
  auto api = broker::HttpApi::Create(*cfg, &store, dispatcher->get(), &waiters, &metrics);
  if (!api.ok()) return Fail(api.status());

  spdlog::info("broker {} ready: http on port {}, workers on {}, redis {}", cfg->id, (*api)->port(),
               (*dispatcher)->endpoint(), cfg->redis_url);
  std::jthread loop([&](std::stop_token st) { (*dispatcher)->Run(st); });
  std::thread http([&] { (*api)->Serve(); });

  int sig = 0;
  sigwait(&stop_signals, &sig);
  spdlog::info("broker {} stopping (signal {})", cfg->id, sig);
  (*api)->Stop();
  http.join();
  loop.request_stop();
  loop.join();
  return 0;
}
