// kiln-broker: parses flags, loads the config and wires the parts together.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <optional>
#include <thread>

#include "broker/api/http_api.hpp"
#include "broker/auth/endpoint_exposure.hpp"
#include "broker/auth/worker_keyring.hpp"
#include "broker/config.hpp"
#include "broker/metrics/broker_metrics.hpp"
#include "broker/native/native_api.hpp"
#include "broker/policy/policy.hpp"
#include "broker/scheduler/audit_writer.hpp"
#include "broker/scheduler/dispatcher.hpp"
#include "broker/scheduler/event_bus.hpp"
#include "broker/service/rate_limiter.hpp"
#include "broker/store/audit_store.hpp"
#include "broker/store/job_store.hpp"
#include "broker/store/redis_probe.hpp"
#include "broker/store/schedule_store.hpp"
#include "broker/store/session_store.hpp"
#include "broker/store/tool_store.hpp"
#include "broker/stream/output_follower.hpp"
#include "broker/stream/unread_budget.hpp"
#include "broker/tools/tool_relay.hpp"
#include "broker/webhook/webhook_sender.hpp"
#include "common/allocator_tuning.hpp"
#include "common/curve/curve_keys.hpp"
#include "common/fd_limit.hpp"
#include "common/log/logging.hpp"
#include "common/stop_signals.hpp"
#include "common/thread_name.hpp"

namespace {

int Fail(const kiln::common::Status& st) {
  spdlog::critical("{}", st.ToString());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kiln;
  common::ReturnFreedMemory();
  CLI::App app{"kiln-broker: accepts execution jobs and dispatches them to Kiln workers"};
  std::string config_file;
  std::string http_listen, worker_endpoint, redis_url, client_endpoint;
  bool routes = false;
  app.add_option("-c,--config", config_file, "YAML config file (docs/configuration.md)");
  app.add_flag("--routes", routes,
               "print the HTTP routes (METHOD PATH per line, docs/openapi.yaml) and exit");
  app.add_option("--http", http_listen, "override broker.http.listen (host:port)");
  app.add_option("--workers", worker_endpoint, "override broker.workers.endpoint");
  app.add_option("--redis", redis_url, "override broker.redis.url");
  app.add_option("--clients", client_endpoint, "override broker.clients.endpoint (\"off\": none)");
  CLI11_PARSE(app, argc, argv);
  if (routes) {
    for (const auto& r : broker::HttpApi::RouteSpecs()) {
      printf("%s %s\n", r.method.c_str(), r.pattern.c_str());
    }
    return 0;
  }
  if (config_file.empty()) {
    fprintf(stderr, "kiln-broker: --config is required\n");
    return 2;
  }

  auto cfg = broker::LoadBrokerConfig(config_file);
  if (!cfg.ok()) {
    fprintf(stderr, "kiln-broker: %s\n", cfg.status().ToString().c_str());
    return 2;
  }
  if (!http_listen.empty()) cfg->http.listen = http_listen;
  if (!worker_endpoint.empty()) cfg->worker_endpoint = worker_endpoint;
  if (!redis_url.empty()) cfg->redis_url = redis_url;
  if (!client_endpoint.empty())
    cfg->native.endpoint = client_endpoint == "off" ? "" : client_endpoint;
  cfg->log.instance = cfg->id;
  if (auto st = common::InitLogging(cfg->log); !st.ok()) {
    return Fail(st);
  }

  sigset_t stop_signals = common::BlockStopSignals();
  // One descriptor per client and worker connection: allow as many as we may.
  if (auto fds = common::RaiseFdLimit(); fds.ok()) {
    spdlog::info("open files limit: {}", *fds);
  } else {
    spdlog::warn("open files limit unchanged: {}", fds.status().ToString());
  }

  auto endpoint = broker::RedisEndpoint::Parse(cfg->redis_url);
  if (!endpoint.ok()) return Fail(endpoint.status());
  auto pool = broker::RedisPool::Create(cfg->redis_url, cfg->redis_pool_size);
  if (!pool.ok()) return Fail(pool.status());
  broker::JobStore store(pool->get(), cfg->job_ttl_s);

  const auto& sc = cfg->scheduling;
  broker::ScheduleSettings settings;
  settings.broker_id = cfg->id;
  settings.global_slots = sc.global_slots;
  settings.lease_ms = sc.slot_lease_ms;
  settings.job_ttl_s = cfg->job_ttl_s;
  settings.session_ttl_ms = sc.session_ttl_s * 1000;
  settings.sessions_per_worker = sc.worker_max_sessions;
  broker::ScheduleStore schedule(pool->get(), settings);
  broker::SessionStore sessions(pool->get(), settings.session_ttl_ms);
  broker::DispatcherStores stores{&store, &schedule, &sessions};
  broker::ToolStore tool_calls(pool->get(), cfg->job_ttl_s);

  auto policy = broker::PolicyEngine::Create(cfg->policy);
  if (!policy.ok()) return Fail(policy.status().WithContext(config_file));
  broker::AuditStore audit(pool->get(), cfg->audit_max_entries);

  zmq::context_t zmq_ctx(1);
  broker::JobWaiters waiters;
  broker::BrokerMetrics metrics;
  broker::DispatcherOptions dopts;
  dopts.broker_id = cfg->id;
  dopts.endpoint = cfg->worker_endpoint;
  dopts.heartbeat_interval = std::chrono::milliseconds(cfg->heartbeat_interval_ms);
  dopts.liveness = cfg->heartbeat_liveness;
  dopts.worker_slot_cap = sc.worker_slots;
  dopts.pump_interval = std::chrono::milliseconds(sc.pump_interval_ms);
  const bool curve = !cfg->worker_secret_key_file.empty();
  if (auto st = broker::CheckWorkerEndpointExposure(cfg->worker_endpoint, curve,
                                                    cfg->worker_allow_unauthenticated);
      !st.ok()) {
    return Fail(st.WithContext(config_file));
  }
  std::optional<broker::WorkerKeyring> keyring;
  if (curve) {
    auto own = common::ReadCurveSecretKeyFile(cfg->worker_secret_key_file);
    if (!own.ok()) return Fail(own.status());
    dopts.curve_secret_key = own->secret_z85;
    dopts.keyring = &keyring.emplace(cfg->worker_accepted_keys_dir);
    spdlog::info("worker endpoint: CURVE, broker key {}, accepted keys from {}", own->public_z85,
                 cfg->worker_accepted_keys_dir);
  } else if (!broker::IsLoopbackEndpoint(cfg->worker_endpoint)) {
    spdlog::warn(
        "worker endpoint {} takes unauthenticated workers from other hosts "
        "(broker.workers.allow_unauthenticated)",
        cfg->worker_endpoint);
  }
  std::vector<std::pair<std::string, uint64_t>> tenant_limits;
  for (const auto& t : cfg->tenants) {
    if (!t.secrets.empty()) dopts.tenant_secrets[t.name] = t.secrets;
    dopts.tenant_shares.push_back(
        {t.name, broker::TenantSlots(*cfg, t), broker::TenantWeight(*cfg, t)});
    tenant_limits.emplace_back(t.name, broker::TenantSlots(*cfg, t));
  }
  metrics.SetLimits(sc.global_slots, tenant_limits);
  dopts.metrics = &metrics;
  broker::AuditWriter audit_writer(&audit, &store, &metrics, {}, &tool_calls);
  broker::WebhookStore webhook_outbox(pool->get());
  broker::WebhookSender webhook_sender(*cfg, &webhook_outbox, &store, &metrics);
  dopts.audit = &audit_writer;
  broker::ToolRelay tool_relay(&store, &tool_calls, &metrics);
  dopts.on_tool_call = [&tool_relay](const std::string& worker, common::protocol::ToolCall c) {
    tool_relay.Post(worker, std::move(c));
  };
  // Every socket is bound before Redis is asked anything: a port in use stops
  // the broker at once, not after Redis has loaded.
  auto dispatcher = broker::Dispatcher::Create(dopts, &zmq_ctx, stores, &waiters);
  if (!dispatcher.ok()) return Fail(dispatcher.status());
  tool_relay.Attach(dispatcher->get());
  // One set of submit rate buckets for both front ends: the rate is per broker.
  broker::SubmitRateLimiter submit_rates(*cfg);
  const broker::Governance governance{&*policy, &audit, &audit_writer, &submit_rates};
  broker::RedisProbe probe(*endpoint);
  broker::OutputFollower follower(*endpoint, &store, &waiters);
  broker::UnreadBudget unread;  // outlives both front ends and the follower's readers
  broker::ExecutionService service(*cfg, stores, dispatcher->get(), &waiters, &unread, &metrics,
                                   governance);
  broker::HttpApiDeps http_deps{&service, dispatcher->get(), &waiters,   &follower, &unread,
                                &probe,   &metrics,          &tool_relay};
  auto api = broker::HttpApi::Create(*cfg, http_deps);
  if (!api.ok()) return Fail(api.status());
  std::unique_ptr<broker::NativeApi> native;  // the native client protocol, unless off
  if (!cfg->native.endpoint.empty()) {
    auto n = broker::NativeApi::Create(*cfg, &zmq_ctx, &service, &follower, &unread, &metrics);
    if (!n.ok()) return Fail(n.status());
    native = std::move(*n);
    native->SetToolRelay(&tool_relay);
    if (cfg->native.secret_key_file.empty() && !broker::IsLoopbackEndpoint(cfg->native.endpoint)) {
      spdlog::warn(
          "native client endpoint {} is reachable from other hosts in plain text: tokens "
          "travel in clear (broker.clients.secret_key_file turns on CURVE)",
          cfg->native.endpoint);
    }
  }
  broker::EventBus bus(*endpoint, &waiters, &store,
                       [d = dispatcher->get()](const std::string& id) { d->Cancel(id); });

  // The front ends answer while Redis loads or is away, as they do when it
  // goes away later: /v1/health 503 with the probe's error, calls that need
  // Redis 503 UNAVAILABLE. Workers connect and wait for the dispatcher.
  // Named for top -H and perf (docs/operations.md, "Troubleshooting").
  const auto named = [](const char* name, auto run) {
    return std::jthread([name, run](std::stop_token st) {
      common::NameThisThread(name);
      run(st);
    });
  };
  std::jthread probing = named("kiln-probe", [&](std::stop_token st) { probe.Run(st); });
  (*api)->Start();
  std::jthread clients;
  if (native) clients = named("kiln-native", [&](std::stop_token st) { native->Run(st); });
  int sig = 0;
  const auto pause = [&](std::chrono::milliseconds d) {  // false: a stop signal came
    const timespec ts{static_cast<time_t>(d.count() / 1000),
                      static_cast<long>(d.count() % 1000) * 1'000'000};
    sig = sigtimedwait(&stop_signals, nullptr, &ts);
    return sig <= 0;
  };
  const broker::RedisStartStep tenants{
      "store the tenant limits", [&] { return schedule.PublishTenants(dopts.tenant_shares); }};
  if (auto st = broker::AwaitRedis(*endpoint, endpoint->Redacted(), {&tenants, 1}, pause);
      !st.ok()) {
    if (st.code() != common::Code::kCancelled) return Fail(st);
    spdlog::info("broker {} stopping (signal {}) before it served: {}", cfg->id, sig, st.message());
    return 0;  // the front ends stop as they go out of scope
  }

  spdlog::info("broker {} ready: http on port {}, workers on {}, clients on {}, redis {}", cfg->id,
               (*api)->port(), (*dispatcher)->endpoint(), native ? native->endpoint() : "(off)",
               endpoint->Redacted());
  std::jthread loop = named("kiln-dispatch", [&](std::stop_token st) { (*dispatcher)->Run(st); });
  std::jthread events = named("kiln-events", [&](std::stop_token st) { bus.Run(st); });
  std::jthread auditing = named("kiln-audit", [&](std::stop_token st) { audit_writer.Run(st); });
  std::jthread webhooks =
      named("kiln-webhooks", [&](std::stop_token st) { webhook_sender.Run(st); });
  std::jthread tools = named("kiln-tools", [&](std::stop_token st) { tool_relay.Run(st); });
  std::jthread following = named("kiln-follow", [&](std::stop_token st) { follower.Run(st); });

  sigwait(&stop_signals, &sig);
  spdlog::info("broker {} stopping (signal {})", cfg->id, sig);
  (*api)->Stop();
  if (clients.joinable()) {
    clients.request_stop();
    clients.join();
  }
  events.request_stop();
  events.join();
  loop.request_stop();
  loop.join();
  auditing.request_stop();  // after the loop: it writes what the loop queued
  auditing.join();
  return 0;
}
