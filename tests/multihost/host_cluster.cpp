// HostCluster: Kiln on a NetnsBed (see host_cluster.hpp).
#include "tests/multihost/host_cluster.hpp"

#include <dirent.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <stdexcept>

#include "common/curve/curve_keys.hpp"
#include "tests/support/rogue_worker.hpp"

namespace kiln::testing {
namespace {

using json = nlohmann::json;

// The kiln-broker and kiln-worker to run: this build's, or those of
// $KILN_TEST_BIN_DIR (as for TestCluster).
std::string BinDir() {
  const char* dir = getenv("KILN_TEST_BIN_DIR");
  return (dir != nullptr && *dir != '\0' ? std::string(dir)
                                         : std::string(KILN_BINARY_DIR) + "/bin") +
         "/";
}

// What a worker killed with jobs running leaves (a restarted worker would
// remove it: CleanupStale): its workspaces' tmpfs mounts under dir and its
// empty cgroups. Only that run's: paths under dir, cgroups named with its suffix.
void RemoveWorkerLeftovers(const std::string& dir, const std::string& suffix) {
  std::vector<std::string> mounts;
  std::istringstream table(ReadFile("/proc/self/mounts"));
  for (std::string line; std::getline(table, line);) {
    std::istringstream fields(line);
    std::string source, target;
    fields >> source >> target;
    if (target.rfind(dir + "/", 0) == 0) mounts.push_back(target);
  }
  std::sort(mounts.rbegin(), mounts.rend());  // deeper first
  for (const auto& m : mounts) ::umount2(m.c_str(), MNT_DETACH);
  const std::string prefix = "kiln-mh-" + suffix + "-";
  std::error_code ec;
  std::vector<std::filesystem::path> roots = {"/sys/fs/cgroup"};
  for (const auto& e : std::filesystem::directory_iterator("/sys/fs/cgroup", ec)) {
    if (e.is_directory(ec) && !e.is_symlink(ec)) roots.push_back(e.path());
  }
  for (const auto& root : roots) {
    for (const auto& e : std::filesystem::directory_iterator(root, ec)) {
      if (e.path().filename().string().rfind(prefix, 0) != 0) continue;
      std::vector<std::filesystem::path> dirs = {e.path()};
      for (auto it = std::filesystem::recursive_directory_iterator(e.path(), ec);
           it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
        if (it->is_directory(ec)) dirs.push_back(it->path());
      }
      std::sort(dirs.rbegin(), dirs.rend());  // children first
      for (const auto& d : dirs) ::rmdir(d.c_str());
    }
  }
}

// Beds of runs that died (SIGKILL, a crash) leave their workers' mounts,
// cgroups and temp dir behind: /tmp/kiln-mh-h<pid>-<suffix> names the run.
void RemoveStaleRuns() {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/tmp", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("kiln-mh-h", 0) != 0) continue;
    const size_t dash = name.find('-', 9);
    if (dash == std::string::npos) continue;
    const pid_t owner = static_cast<pid_t>(std::atol(name.substr(9, dash - 9).c_str()));
    if (owner <= 0 || owner == ::getpid() || BedOwnerAlive(owner)) continue;
    ThawLeftoverSandboxes("kiln-mh-" + name.substr(dash + 1) + "-");
    RemoveWorkerLeftovers(e.path().string(), name.substr(dash + 1));
    RemoveTree(e.path().string());
  }
}

const std::vector<std::string> kHosts = {"redis", "b1", "b2", "w1", "w2", "w3", "x"};
const std::vector<std::string> kRedisHosts = {"redis", "r2", "r3"};  // with redis_ha
constexpr const char* kWebHost = "web";                              // with web, after the others

// The fake internet's script, from the source tree (as package_index.py).
std::string FakeInternetScript() {
  return std::string(KILN_SOURCE_DIR) + "/tests/multihost/fake_internet.py";
}

}  // namespace

bool IsTerminalStatus(const json& record) {
  if (!record.is_object() || !record.contains("status") || !record["status"].is_string()) {
    return false;
  }
  const std::string s = record["status"].get<std::string>();
  return s != "queued" && s != "running";
}

std::unique_ptr<HostCluster> HostCluster::Start(const HostClusterOptions& options) {
  if (options.web && options.redis_ha) {
    throw std::invalid_argument(
        "HostClusterOptions: `web` and `redis_ha` together need 10 hosts; the bed has at most 9");
  }
  std::unique_ptr<HostCluster> c(new HostCluster());
  c->options_ = options;
  std::vector<std::string> hosts = kHosts;
  if (options.redis_ha) hosts.insert(hosts.end(), kRedisHosts.begin() + 1, kRedisHosts.end());
  if (options.web) hosts.push_back(kWebHost);
  c->bed_ = NetnsBed::Create(hosts);  // first removes the namespaces of dead runs
  RemoveStaleRuns();
  c->dir_ = MakeTempDir("kiln-mh-h" + std::to_string(::getpid()));
  c->suffix_ = c->dir_.substr(c->dir_.rfind('-') + 1);
  c->MakeKeys();
  // First, so that making its certificates overlaps the rest of the set-up.
  if (options.web) c->StartWeb();
  c->StartRedis();
  const std::string redis_ip = c->bed_->ip("redis");
  // redis-cli runs on "x": the root namespace has no route to the bed.
  const bool redis_answers = WaitFor(
      [&] {
        return c->bed_->RunIn("x", [&] {
          std::string out;
          RunCommand("redis-cli -h " + redis_ip + " -p " + std::to_string(kRedisPort) + " PING",
                     &out);
          return out.find("PONG") != std::string::npos;
        });
      },
      std::chrono::seconds(10));
  if (!redis_answers) throw std::runtime_error("redis-server did not start: " + c->DumpLogs());
  if (options.redis_ha) c->StartRedisReplicasAndSentinels();
  for (int b = 0; b < kBrokers; ++b) {
    c->brokers_.emplace_back();
    c->StartBroker(b);
  }
  for (int b = 0; b < kBrokers; ++b) {
    const bool up =
        WaitFor([&] { return c->Request("GET", "/v1/health", "", "", b).status == 200; },
                std::chrono::seconds(15));
    if (!up) throw std::runtime_error("broker did not start: " + c->DumpLogs());
  }
  for (int w = 0; w < options.workers; ++w) {
    c->workers_.emplace_back();
    c->StartWorker(w);
  }
  if (!c->WaitForWorkers(options.workers, std::chrono::seconds(30))) {
    throw std::runtime_error("workers did not register: " + c->DumpLogs());
  }
  if (options.web) c->WaitForWeb();
  return c;
}

void HostCluster::StartWeb() {
  web_ = bed_->Start(
      kWebHost,
      {"/usr/bin/python3", FakeInternetScript(), "--dir", web_dir(), "--names", kWebNames},
      dir_ + "/web.log");
}

void HostCluster::WaitForWeb() {
  const bool ready = WaitFor(
      [&] { return ::access((web_dir() + "/ready").c_str(), F_OK) == 0 || !web_.running(); },
      std::chrono::seconds(20));
  if (!ready || !web_.running()) {
    throw std::runtime_error("fake_internet.py did not start: " + DumpLogs());
  }
}

std::string HostCluster::web_ip() const {
  if (!options_.web) throw std::logic_error("web_ip: no host \"web\" (HostClusterOptions::web)");
  return bed_->ip(kWebHost);
}

std::string HostCluster::WebLog() const { return ReadFile(web_dir() + "/requests.log"); }

void HostCluster::MakeKeys() {
  auto make = [&](const std::string& name) { return NewKeyFiles(keys_dir(), name); };
  ::mkdir(keys_dir().c_str(), 0700);
  ::mkdir((dir_ + "/accepted").c_str(), 0700);
  make("broker");
  for (int w = 0; w < kWorkers; ++w) {
    const auto kp = make(worker_id(w));
    WriteFile(dir_ + "/accepted/" + worker_id(w) + ".pub", kp.public_z85 + "\n");
  }
}

void HostCluster::StartRedis() {
  ::mkdir((dir_ + "/redis").c_str(), 0700);
  redis_ = bed_->Start("redis",
                       {"/usr/bin/redis-server", "--bind", bed_->ip("redis"), "--port",
                        std::to_string(kRedisPort), "--protected-mode", "no", "--dir",
                        dir_ + "/redis", "--save", "", "--appendonly", "yes", "--daemonize", "no"},
                       dir_ + "/redis.log");
}

void HostCluster::StartRedisReplicasAndSentinels() {
  const std::string master_ip = bed_->ip("redis");
  for (size_t i = 1; i < kRedisHosts.size(); ++i) {
    const std::string& host = kRedisHosts[i];
    ::mkdir((dir_ + "/" + host).c_str(), 0700);
    replicas_.push_back(bed_->Start(host,
                                    {"/usr/bin/redis-server",
                                     "--bind",
                                     bed_->ip(host),
                                     "--port",
                                     std::to_string(kRedisPort),
                                     "--protected-mode",
                                     "no",
                                     "--dir",
                                     dir_ + "/" + host,
                                     "--save",
                                     "",
                                     "--appendonly",
                                     "yes",
                                     "--replicaof",
                                     master_ip,
                                     std::to_string(kRedisPort),
                                     "--repl-diskless-sync",
                                     "yes",
                                     "--repl-diskless-sync-delay",
                                     "0",
                                     "--daemonize",
                                     "no"},
                                    dir_ + "/" + host + ".log"));
  }
  // A sentinel on each Redis host, quorum 2: any two agree that the master
  // is down after 1 s of silence. Each rewrites its own config file.
  for (const std::string& host : kRedisHosts) {
    const std::string conf = dir_ + "/sentinel-" + host + ".conf";
    WriteFile(conf, "port " + std::to_string(kSentinelPort) + "\nbind " + bed_->ip(host) +
                        "\nprotected-mode no\ndir " + dir_ + "\nsentinel monitor " + kRedisMaster +
                        " " + master_ip + " " + std::to_string(kRedisPort) +
                        " 2\nsentinel down-after-milliseconds " + kRedisMaster +
                        " 1000\nsentinel failover-timeout " + kRedisMaster +
                        " 4000\nsentinel parallel-syncs " + kRedisMaster + " 2\n");
    sentinels_.push_back(bed_->Start(host, {"/usr/bin/redis-server", conf, "--sentinel"},
                                     dir_ + "/sentinel-" + host + ".log"));
  }
  // Ready when both replicas are in sync and each sentinel knows the other
  // two and both replicas (they meet through the master's hello channel).
  const bool ready = WaitFor(
      [&] {
        const std::string info = RedisCli(master_ip, kRedisPort, "INFO replication");
        if (info.find("connected_slaves:2") == std::string::npos) return false;
        for (const std::string& host : kRedisHosts) {
          const std::string ip = bed_->ip(host);
          const std::string m =
              RedisCli(ip, kSentinelPort, "SENTINEL master " + std::string(kRedisMaster));
          if (m.find("num-other-sentinels\n2\n") == std::string::npos ||
              m.find("num-slaves\n2\n") == std::string::npos) {
            return false;
          }
        }
        return true;
      },
      std::chrono::seconds(30));
  if (!ready) throw std::runtime_error("Redis replicas and sentinels not ready: " + DumpLogs());
}

std::string HostCluster::RedisCli(const std::string& host, int port,
                                  const std::string& args) const {
  return bed_->RunIn("x", [&] {
    std::string out;
    RunCommand("redis-cli -h " + host + " -p " + std::to_string(port) + " " + args, &out);
    return out;
  });
}

std::string HostCluster::RedisMasterHost() const {
  std::string agreed;
  for (const std::string& host : kRedisHosts) {
    if (host == lost_redis_host_) continue;
    const std::string out =
        RedisCli(bed_->ip(host), kSentinelPort,
                 "SENTINEL get-master-addr-by-name " + std::string(kRedisMaster));
    std::string named;
    for (const std::string& h : kRedisHosts) {
      if (out.rfind(bed_->ip(h) + "\n", 0) == 0) named = h;
    }
    if (named.empty() || (!agreed.empty() && named != agreed)) return "";
    agreed = named;
  }
  return agreed;
}

void HostCluster::LoseRedisMasterHost() {
  const std::string host = RedisMasterHost();
  if (host.empty()) throw std::runtime_error("the sentinels name no master");
  bed_->Partition(host);
  lost_redis_host_ = host;
  const size_t i = static_cast<size_t>(std::find(kRedisHosts.begin(), kRedisHosts.end(), host) -
                                       kRedisHosts.begin());
  (i == 0 ? redis_ : replicas_.at(i - 1)).Kill();
  sentinels_.at(i).Kill();
}

std::string HostCluster::RedisUrl() const {
  if (!options_.redis_ha) return "redis://" + bed_->ip("redis") + ":" + std::to_string(kRedisPort);
  std::string url = "redis+sentinel://";
  for (size_t i = 0; i < kRedisHosts.size(); ++i) {
    url += (i ? "," : "") + bed_->ip(kRedisHosts[i]) + ":" + std::to_string(kSentinelPort);
  }
  return url + "/" + kRedisMaster + "?min_replicas=1&replica_timeout_ms=1000";
}

std::string HostCluster::worker_endpoint(int b) const {
  return "tcp://" + bed_->ip(broker_host(b)) + ":" + std::to_string(kWorkerPort);
}

void HostCluster::StartBroker(int b) {
  const std::string cfg = dir_ + "/" + broker_host(b) + ".yaml";
  std::ostringstream y;
  y << "broker:\n"
    << "  id: " << broker_host(b) << "\n"
    << "  http: {listen: \"0.0.0.0:" << kHttpPort << "\", threads: 32}\n"
    << "  workers: {endpoint: \"tcp://0.0.0.0:" << kWorkerPort
    << "\", heartbeat_interval_ms: " << options_.heartbeat_interval_ms
    << ", heartbeat_liveness: " << options_.heartbeat_liveness << ", secret_key_file: \""
    << keys_dir() << "/broker.key\", accepted_keys_dir: \"" << dir_ << "/accepted\"}\n"
    << "  clients: {endpoint: \"tcp://127.0.0.1:5556\"}\n"
    << "  redis: {url: \"" << RedisUrl() << "\"}\n"
    << "scheduling: {slot_lease_ms: " << options_.slot_lease_ms << "}\n"
    << "limits:\n"
    << "  default: {timeout_ms: 20000, max_output_bytes: 65536}\n"
    << "  max: {timeout_ms: 60000, max_output_bytes: 1048576}\n"
    << "tenants:\n"
    << "  - {name: tenant-a, tokens: [\"" << kToken << "\"], enabled: true, auto_approve: true}\n"
    << options_.tenants_yaml << "admin_tokens: [\"" << kAdminToken << "\"]\n";
  WriteFile(cfg, y.str());
  brokers_.at(b) = bed_->Start(broker_host(b), {BinDir() + "kiln-broker", "--config", cfg},
                               dir_ + "/" + broker_host(b) + ".log");
}

void HostCluster::StartWorker(int w) {
  const std::string cfg = dir_ + "/" + worker_host(w) + ".yaml";
  std::ostringstream y;
  y << "worker:\n"
    << "  id: " << worker_id(w) << "\n"
    << "  slots: " << options_.slots << "\n"
    << "  runtimes: [";
  for (size_t i = 0; i < options_.runtimes.size(); ++i) {
    y << (i ? ", " : "") << options_.runtimes[i];
  }
  y << "]\n"
    << "  warm_per_runtime: 1\n"
    << "  heartbeat_interval_ms: " << options_.heartbeat_interval_ms << "\n"
    << "  heartbeat_liveness: " << options_.heartbeat_liveness << "\n"
    << "  brokers: [";
  for (int b = 0; b < kBrokers; ++b) y << (b ? ", " : "") << "\"" << worker_endpoint(b) << "\"";
  y << "]\n"
    << "  secret_key_file: \"" << keys_dir() << "/" << worker_id(w) << ".key\"\n"
    << "  broker_key_file: \"" << keys_dir() << "/broker.pub\"\n"
    << "sandbox:\n"
    << "  state_dir: " << dir_ << "/" << worker_host(w) << "-state\n"
    << "  cgroup_prefix: kiln-mh-" << suffix_ << "-" << worker_host(w) << "\n"
    << "  uid_base: " << kUidBase + 10000 * w << "\n"
    << "  uid_count: 10000\n"
    << WithHostIps(options_.worker_yaml);
  WriteFile(cfg, y.str());
  workers_.at(w) = bed_->Start(worker_host(w), {BinDir() + "kiln-worker", "--config", cfg},
                               dir_ + "/" + worker_host(w) + ".log");
}

HostCluster::~HostCluster() {
  // Healed first, so that every process can say goodbye and stop at once.
  if (bed_) {
    std::vector<std::string> hosts = {"redis", "b1", "b2", "w1", "w2", "w3"};
    if (options_.web) hosts.push_back(kWebHost);  // a test may cut the "internet" off
    if (!lost_redis_host_.empty() && lost_redis_host_ != "redis") hosts.push_back(lost_redis_host_);
    for (const std::string& host : hosts) {
      try {
        bed_->Heal(host);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "heal %s: %s\n", host.c_str(), e.what());
      }
    }
  }
  // A worker drains on SIGTERM (its jobs run to their end); 2 s, then SIGKILL.
  for (auto& w : workers_) w.Stop(std::chrono::seconds(2));
  ThawLeftoverSandboxes("kiln-mh-" + suffix_ + "-");
  RemoveWorkerLeftovers(dir_, suffix_);
  for (auto& b : brokers_) b.Stop();
  web_.Stop();  // after the workers: no job is still talking to it
  for (auto& s : sentinels_) s.Stop();
  for (auto& r : replicas_) r.Stop();
  redis_.Stop();
  bed_.reset();
  if (!dir_.empty() && getenv("KILN_KEEP_TEST_DIR") == nullptr) RemoveTree(dir_);
}

HttpReply HostCluster::Request(const std::string& method, const std::string& path,
                               const std::string& body, const std::string& token,
                               int broker) const {
  const std::string host = bed_->ip(broker_host(broker));
  return bed_->RunIn("x", [&] {
    httplib::Client cli(host, kHttpPort);
    cli.set_read_timeout(60, 0);
    cli.set_connection_timeout(2, 0);
    httplib::Headers headers;
    if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
    httplib::Result r = method == "GET" ? cli.Get(path.c_str(), headers)
                                        : cli.Post(path.c_str(), headers, body, "application/json");
    HttpReply reply;
    if (!r) return reply;
    reply.status = r->status;
    reply.raw = r->body;
    reply.headers = r->headers;
    reply.body = json::parse(r->body, nullptr, false);
    return reply;
  });
}

HttpReply HostCluster::Submit(const json& request, int broker) const {
  return Request("POST", "/v1/executions", request.dump(), kToken, broker);
}

json HostCluster::Record(const std::string& id, int broker) const {
  HttpReply r = Request("GET", "/v1/executions/" + id, "", kToken, broker);
  return r.status == 200 ? r.body : json();
}

json HostCluster::WaitTerminal(const std::string& id, std::chrono::milliseconds timeout,
                               int broker) const {
  return WaitRecord(id, IsTerminalStatus, timeout, broker);
}

std::vector<std::string> HostCluster::WorkerIds(int broker) const {
  std::vector<std::string> ids;
  HttpReply r = Request("GET", "/v1/workers", "", kAdminToken, broker);
  if (r.status != 200 || !r.body.is_object() || !r.body["workers"].is_array()) return ids;
  for (const json& w : r.body["workers"]) ids.push_back(w.value("id", ""));
  return ids;
}

bool HostCluster::WaitForWorkers(size_t n, std::chrono::milliseconds timeout,
                                 const std::vector<int>& brokers) const {
  return WaitFor(
      [&] {
        for (int b : brokers) {
          if (WorkerIds(b).size() != n) return false;
        }
        return true;
      },
      timeout);
}

double HostCluster::Metric(int broker, const std::string& series) const {
  const std::string text = Request("GET", "/metrics", "", kToken, broker).raw;
  const auto at = text.find("\n" + series + " ");
  return at == std::string::npos ? -1.0 : std::stod(text.substr(at + series.size() + 2));
}

std::string HostCluster::WithHostIps(std::string text) const {
  for (size_t at; (at = text.find("{ip:")) != std::string::npos;) {
    const size_t end = text.find('}', at);
    if (end == std::string::npos) break;
    text.replace(at, end + 1 - at, bed_->ip(text.substr(at + 4, end - at - 4)));
  }
  return text;
}

std::string HostCluster::DumpLogs() const {
  std::ostringstream out;
  DIR* d = ::opendir(dir_.c_str());
  if (d == nullptr) return "";
  std::vector<std::string> logs;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() > 4 && name.substr(name.size() - 4) == ".log") logs.push_back(name);
  }
  ::closedir(d);
  // web.log is the fake internet's output; what reached it is in requests.log.
  if (options_.web) logs.push_back("web/requests.log");
  for (const std::string& name : logs) {
    std::string text = ReadFile(dir_ + "/" + name);
    if (text.size() > 6000) text = "..." + text.substr(text.size() - 6000);
    out << "==== " << name << " ====\n" << text << "\n";
  }
  return out.str();
}

}  // namespace kiln::testing
