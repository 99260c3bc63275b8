// kiln-bench: load generator for a running Kiln cluster.
//
//   kiln-bench --url http://127.0.0.1:8080 --token T --concurrency 4 --jobs 500 --lang python
//   kiln-bench --url http://a:8080 --url http://b:8080 --duration 30 --json
//   kiln-bench --protocol native --endpoint tcp://127.0.0.1:5556 --token T -c 16 --jobs 5000
//
// N client threads, each with its own keep-alive httplib::Client (threads are
// spread round-robin over the --url brokers), submit `wait: true` jobs back to
// back. After --warmup unmeasured jobs (shared by all threads) a barrier starts
// the measured phase; it ends after --jobs jobs or --duration seconds (jobs in
// flight at the deadline still count). Reports client-measured end-to-end
// latency percentiles, throughput, and the medians of the records' server-side
// duration_ms and queued_ms. Exit status 1 when any job did not succeed.
// Latency and server figures cover succeeded jobs; failures are counted by
// outcome ("<status>/<error.code>", "http <status>/<code>", "transport/<error>").
// --session runs every client's jobs in a session of its own (the round trip
// of a statement in a live interpreter; warmup jobs create the sessions).
// --protocol native runs the same jobs over the brokers' native ZeroMQ client
// endpoints (--endpoint; one DEALER per client, submit with subscribe, timed
// to the job's result: native_submitter.hpp), so the figures compare.
#include <httplib.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "common/clock.hpp"
#include "tests/bench/bench_sample.hpp"
#include "tests/bench/latency_stats.hpp"
#include "tests/bench/native_submitter.hpp"

namespace kiln::bench {
namespace {

using common::MsSince;
using common::SteadyClock;
using nlohmann::json;

struct Options {
  std::string protocol = "http";       // or "native"
  std::vector<std::string> urls;       // http
  std::vector<std::string> endpoints;  // native: the brokers' broker.clients.endpoint
  std::string token;
  int concurrency = 4;
  int64_t jobs = 0;       // measured jobs; 0 with duration_s > 0
  double duration_s = 0;  // measured seconds; 0 with jobs > 0
  int64_t warmup = 20;
  std::string lang = "python";
  std::string code;
  int timeout_s = 120;
  bool new_connection = false;  // a fresh connection (or DEALER) per job instead of keep-alive
  int pause_ms = 0;             // each client waits this long between jobs (latency when idle)
  bool json_output = false;
  std::string json_file;
  // Each client runs its jobs in its own session ("<prefix>-<pid>-<client>"),
  // so every job after the first reuses the session's live interpreter.
  std::string session_prefix;
};

std::string DefaultCode(const std::string& lang) {
  if (lang == "javascript") return "var x = 1";  // `let` twice fails in a session
  if (lang == "shell") return "true";
  return "x = 1";
}

Sample SubmitOne(httplib::Client& cli, const httplib::Headers& headers, const std::string& body) {
  Sample s;
  SteadyClock::time_point start = SteadyClock::now();
  httplib::Result r = cli.Post("/v1/executions", headers, body, "application/json");
  s.latency_ms = MsSince(start);
  if (!r) {
    s.outcome = "transport/" + httplib::to_string(r.error());
    s.body = s.outcome;
    return s;
  }
  json j = json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  std::string code = j.is_object() ? ErrorCodeOf(j) : "";
  if (r->status != 200 || !j.is_object()) {
    s.outcome = "http " + std::to_string(r->status) + (code.empty() ? "" : "/" + code);
    s.body = r->body;
    return s;
  }
  const double latency_ms = s.latency_ms;
  s = SampleFromRecord(j);
  s.latency_ms = latency_ms;
  if (!s.ok) s.body = r->body;
  return s;
}

struct RunResult {
  std::vector<Sample> samples;  // measured phase only
  std::map<std::string, int64_t> warmup_outcomes;
  double elapsed_s = 0;  // barrier release -> last measured job answered
  std::string first_error;
};

RunResult Run(const Options& opt) {
  auto body_for = [&](int client) {
    json request = {{"language", opt.lang}, {"code", opt.code}, {"wait", true}};
    if (!opt.session_prefix.empty()) {
      request["session_id"] =
          opt.session_prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(client);
    }
    return request.dump();
  };
  const httplib::Headers headers = {{"Authorization", "Bearer " + opt.token}};

  std::atomic<int64_t> warmup_left{opt.warmup};
  std::atomic<int64_t> jobs_left{opt.jobs};
  SteadyClock::time_point start;
  SteadyClock::time_point deadline;
  std::barrier sync(opt.concurrency, [&]() noexcept {
    start = SteadyClock::now();
    deadline = start + std::chrono::duration_cast<SteadyClock::duration>(
                           std::chrono::duration<double>(opt.duration_s));
  });

  std::mutex mu;  // guards the members of `result` below
  RunResult result;
  std::vector<SteadyClock::time_point> last_done(opt.concurrency);
  std::vector<std::vector<Sample>> per_thread(opt.concurrency);

  zmq::context_t zmq_context;  // for --protocol native; idle otherwise

  auto client_loop = [&](int t) {
    const std::string body = body_for(t);
    std::function<Sample()> submit_one;
    std::optional<httplib::Client> cli;
    std::optional<NativeSubmitter> native;
    if (opt.protocol == "native") {
      const std::string& endpoint = opt.endpoints[t % opt.endpoints.size()];
      submit_one = [&, endpoint] {
        if (!native || opt.new_connection)
          native.emplace(zmq_context, endpoint, opt.token, opt.timeout_s);
        return native->Submit(body);
      };
    } else {
      cli.emplace(opt.urls[t % opt.urls.size()]);
      cli->set_keep_alive(!opt.new_connection);
      cli->set_tcp_nodelay(true);
      cli->set_connection_timeout(5, 0);
      cli->set_read_timeout(opt.timeout_s, 0);
      cli->set_write_timeout(opt.timeout_s, 0);
      submit_one = [&] { return SubmitOne(*cli, headers, body); };
    }
    auto note_failure = [&](const Sample& s) {
      std::lock_guard lock(mu);
      if (result.first_error.empty())
        result.first_error = s.outcome + ": " + s.body.substr(0, 4000);
    };

    // In session mode each client creates its own session before measuring.
    bool first = !opt.session_prefix.empty();
    while (std::exchange(first, false) || warmup_left.fetch_sub(1) > 0) {
      Sample s = submit_one();
      if (!s.ok) note_failure(s);
      std::lock_guard lock(mu);
      ++result.warmup_outcomes[s.outcome];
    }
    sync.arrive_and_wait();

    std::vector<Sample>& mine = per_thread[t];
    last_done[t] = start;
    while (opt.duration_s > 0 ? SteadyClock::now() < deadline : jobs_left.fetch_sub(1) > 0) {
      if (opt.pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(opt.pause_ms));
      Sample s = submit_one();
      last_done[t] = SteadyClock::now();
      if (!s.ok) note_failure(s);
      s.body.clear();  // first_error keeps what the report needs
      mine.push_back(std::move(s));
    }
  };

  std::vector<std::thread> threads;
  for (int t = 0; t < opt.concurrency; ++t) threads.emplace_back(client_loop, t);
  for (auto& th : threads) th.join();

  SteadyClock::time_point end = start;
  for (auto& t : last_done) end = std::max(end, t);
  result.elapsed_s = std::chrono::duration<double>(end - start).count();
  for (auto& v : per_thread) {
    for (auto& s : v) result.samples.push_back(std::move(s));
  }
  return result;
}

json SummaryJson(const LatencySummary& s) {
  return {{"count", s.count}, {"min", s.min}, {"mean", s.mean}, {"p50", s.p50},
          {"p90", s.p90},     {"p99", s.p99}, {"max", s.max}};
}

json Report(const Options& opt, const RunResult& r) {
  std::vector<double> latency, duration, queued, accepted;
  std::map<std::string, int64_t> outcomes, by_worker;
  int64_t succeeded = 0;
  for (const Sample& s : r.samples) {
    ++outcomes[s.outcome];
    if (!s.worker.empty()) ++by_worker[s.worker];
    if (!s.ok) continue;
    ++succeeded;
    latency.push_back(s.latency_ms);
    if (s.duration_ms) duration.push_back(*s.duration_ms);
    if (s.queued_ms) queued.push_back(*s.queued_ms);
    if (s.accepted_ms) accepted.push_back(*s.accepted_ms);
  }
  LatencySummary lat = Summarize(latency);
  LatencySummary dur = Summarize(duration);
  LatencySummary que = Summarize(queued);
  int64_t warmup_failed = 0;
  for (const auto& [outcome, n] : r.warmup_outcomes) {
    if (outcome != "succeeded") warmup_failed += n;
  }
  const auto total = static_cast<int64_t>(r.samples.size());
  json out = {
      {"protocol", opt.protocol},
      {"urls", opt.protocol == "native" ? json::array() : json(opt.urls)},
      {"endpoints", opt.protocol == "native" ? json(opt.endpoints) : json::array()},
      {"language", opt.lang},
      {"code", opt.code},
      {"concurrency", opt.concurrency},
      {"keep_alive", !opt.new_connection},
      {"warmup", opt.warmup},
      {"warmup_failed", warmup_failed},
      {"jobs", total},
      {"succeeded", succeeded},
      {"failed", total - succeeded},
      {"outcomes", outcomes},
      {"by_worker", by_worker},
      {"elapsed_s", r.elapsed_s},
      {"throughput_jobs_per_s", r.elapsed_s > 0 ? static_cast<double>(total) / r.elapsed_s : 0},
      {"latency_ms", SummaryJson(lat)},
      {"server_duration_ms", SummaryJson(dur)},
      {"server_queued_ms", SummaryJson(que)},
      {"overhead_outside_sandbox_ms", lat.p50 - dur.p50},
      {"first_error", r.first_error.empty() ? json(nullptr) : json(r.first_error)},
  };
  if (opt.duration_s > 0) out["duration_s"] = opt.duration_s;
  if (!accepted.empty()) out["accepted_ms"] = SummaryJson(Summarize(accepted));
  return out;
}

void PrintHuman(const json& rep) {
  const json& lat = rep["latency_ms"];
  const json& dur = rep["server_duration_ms"];
  const json& que = rep["server_queued_ms"];
  std::printf("kiln-bench  %s  %s  concurrency %d  brokers %zu  warmup %lld%s\n",
              rep["protocol"].get<std::string>().c_str(),
              rep["language"].get<std::string>().c_str(), rep["concurrency"].get<int>(),
              rep["urls"].size() + rep["endpoints"].size(),
              static_cast<long long>(rep["warmup"].get<int64_t>()),
              rep["keep_alive"].get<bool>() ? "" : "  new connection per job");
  std::printf("  jobs        %lld: %lld succeeded, %lld failed\n",
              static_cast<long long>(rep["jobs"].get<int64_t>()),
              static_cast<long long>(rep["succeeded"].get<int64_t>()),
              static_cast<long long>(rep["failed"].get<int64_t>()));
  for (const auto& [outcome, n] : rep["outcomes"].items()) {
    if (outcome != "succeeded") {
      std::printf("    %-40s %lld\n", outcome.c_str(), static_cast<long long>(n.get<int64_t>()));
    }
  }
  if (rep["warmup_failed"].get<int64_t>() > 0) {
    std::printf("  warmup      %lld failed\n",
                static_cast<long long>(rep["warmup_failed"].get<int64_t>()));
  }
  std::printf("  throughput  %.1f jobs/s over %.2f s\n", rep["throughput_jobs_per_s"].get<double>(),
              rep["elapsed_s"].get<double>());
  std::printf("  end to end  p50 %.2f  p90 %.2f  p99 %.2f  max %.2f ms  (client, %zu succeeded)\n",
              lat["p50"].get<double>(), lat["p90"].get<double>(), lat["p99"].get<double>(),
              lat["max"].get<double>(), lat["count"].get<size_t>());
  if (rep.contains("accepted_ms")) {
    const json& acc = rep["accepted_ms"];
    std::printf("  accepted    p50 %.2f  p90 %.2f  p99 %.2f ms  (native: submit -> accepted)\n",
                acc["p50"].get<double>(), acc["p90"].get<double>(), acc["p99"].get<double>());
  }
  std::printf("  server      duration p50 %.2f ms (p90 %.2f)  queued p50 %.2f ms (p90 %.2f)\n",
              dur["p50"].get<double>(), dur["p90"].get<double>(), que["p50"].get<double>(),
              que["p90"].get<double>());
  std::printf("  overhead    %.2f ms outside the sandbox (end-to-end p50 - duration p50)\n",
              rep["overhead_outside_sandbox_ms"].get<double>());
  if (!rep["by_worker"].empty()) {
    std::printf("  workers    ");
    for (const auto& [w, n] : rep["by_worker"].items()) {
      std::printf(" %s: %lld", w.c_str(), static_cast<long long>(n.get<int64_t>()));
    }
    std::printf("\n");
  }
  if (!rep["first_error"].is_null()) {
    std::printf("  first error %s\n", rep["first_error"].get<std::string>().c_str());
  }
}

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

}  // namespace
}  // namespace kiln::bench

int main(int argc, char** argv) {
  using namespace kiln::bench;
  Options opt;
  CLI::App app{
      "kiln-bench: N keep-alive clients submit wait:true jobs back to back to Kiln brokers (over "
      "HTTP or the native ZeroMQ protocol) and report throughput and latency"};
  app.add_option("--url", opt.urls,
                 "broker base URL, repeatable: clients spread round-robin "
                 "(default $KILN_URL, else http://127.0.0.1:8080)");
  app.add_option("--protocol", opt.protocol,
                 "http (POST /v1/executions with wait: true) or native (the brokers' ZeroMQ "
                 "client endpoints: one DEALER per client, submit with subscribe, timed to the "
                 "job's result; docs/protocol.md \"Client protocol\"); default http")
      ->check(CLI::IsMember({"http", "native"}));
  app.add_option("--endpoint", opt.endpoints,
                 "with --protocol native: a broker's broker.clients.endpoint, repeatable: "
                 "clients spread round-robin (default $KILN_ENDPOINT, else tcp://127.0.0.1:5556)");
  app.add_option("--token", opt.token, "tenant token (default $KILN_TOKEN)");
  app.add_option("-c,--concurrency", opt.concurrency, "concurrent clients (default 4)")
      ->check(CLI::Range(1, 4096));
  auto* jobs = app.add_option("-n,--jobs", opt.jobs, "measured jobs in total (default 200)")
                   ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  auto* duration = app.add_option("-d,--duration", opt.duration_s,
                                  "measure for this many seconds instead of --jobs")
                       ->check(CLI::PositiveNumber);
  jobs->excludes(duration);
  app.add_option("--warmup", opt.warmup, "unmeasured jobs first (default 20)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("-l,--lang", opt.lang, "python, javascript or shell (default python)")
      ->check(CLI::IsMember({"python", "javascript", "shell"}));
  app.add_option("--code", opt.code,
                 "code of every job (default: x = 1 / let x = 1 / true per language)");
  app.add_option("--timeout", opt.timeout_s, "timeout per job, seconds (default 120)")
      ->check(CLI::Range(1, 86400));
  app.add_flag("--new-connection", opt.new_connection,
               "open a fresh connection per job instead of keep-alive (isolates per-connection "
               "effects such as Nagle delays; native: a fresh DEALER per job)");
  app.add_option("--pause-ms", opt.pause_ms,
                 "each client waits this long before each measured job: the latency of a job "
                 "that finds a warm sandbox ready, rather than the sandbox creation rate");
  app.add_option("--session", opt.session_prefix,
                 "run each client's jobs in its own session named <this>-<pid>-<client> "
                 "(session round trips; the first job creates the session)");
  app.add_flag("--json", opt.json_output, "print one JSON object instead of the table");
  app.add_option("--json-file", opt.json_file, "also write the JSON object to this file");
  CLI11_PARSE(app, argc, argv);

  if (opt.urls.empty()) opt.urls.push_back(EnvOr("KILN_URL", "http://127.0.0.1:8080"));
  if (opt.endpoints.empty()) {
    opt.endpoints.push_back(EnvOr("KILN_ENDPOINT", "tcp://127.0.0.1:5556"));
  }
  for (auto& u : opt.urls) {
    while (!u.empty() && u.back() == '/') u.pop_back();
  }
  if (opt.token.empty()) opt.token = EnvOr("KILN_TOKEN", "");
  if (opt.token.empty()) {
    std::fprintf(stderr, "kiln-bench: no token: pass --token or set KILN_TOKEN\n");
    return 2;
  }
  if (opt.duration_s <= 0 && opt.jobs == 0) opt.jobs = 200;
  if (opt.code.empty()) opt.code = DefaultCode(opt.lang);

  RunResult result = Run(opt);
  nlohmann::json report = Report(opt, result);
  if (!opt.json_file.empty()) {
    std::ofstream f(opt.json_file);
    f << report.dump(2) << "\n";
    if (!f) std::fprintf(stderr, "kiln-bench: cannot write %s\n", opt.json_file.c_str());
  }
  if (opt.json_output) {
    std::printf("%s\n", report.dump(2).c_str());
  } else {
    PrintHuman(report);
  }
  bool all_ok = report["failed"].get<int64_t>() == 0 && report["warmup_failed"].get<int64_t>() == 0;
  return all_ok ? 0 : 1;
}
