#include "tests/support/cluster.hpp"

#include <dirent.h>

#include <cstdio>
#include <sstream>
#include <stdexcept>

namespace kiln::testing {
namespace {

const std::string kBin = std::string(KILN_BINARY_DIR) + "/bin/";

std::string SecretsList(const std::vector<std::string>& secrets) {
  std::string out;
  for (const auto& s : secrets) out += (out.empty() ? "" : ", ") + nlohmann::json(s).dump();
  return out;
}

}  // namespace

std::unique_ptr<TestCluster> TestCluster::Start(const ClusterOptions& options) {
  std::unique_ptr<TestCluster> c(new TestCluster());
  c->options_ = options;
  c->dir_ = MakeTempDir("kiln-it");
  c->redis_port_ = FreePort();
  c->redis_ = ChildProcess::Start(
      {"/usr/bin/redis-server", "--port", std::to_string(c->redis_port_), "--bind", "127.0.0.1",
       "--dir", c->dir_, "--save", "", "--appendonly", "yes", "--daemonize", "no"},
      c->dir_ + "/redis.log");
  bool redis_up = WaitFor([&] { return CanConnect(c->redis_port_); }, std::chrono::seconds(10));
  if (!redis_up) throw std::runtime_error("redis-server did not start: " + c->DumpLogs());
  for (int i = 0; i < options.brokers; ++i) {
    c->http_ports_.push_back(FreePort());
    c->zmq_ports_.push_back(FreePort());
    c->client_ports_.push_back(FreePort());
    c->StartBroker(i);
  }
  for (int i = 0; i < options.brokers; ++i) {
    bool up = WaitFor([&] { return c->Request("GET", "/v1/health", "", "", i).status == 200; },
                      std::chrono::seconds(10));
    if (!up) throw std::runtime_error("broker did not start: " + c->DumpLogs());
  }
  for (int i = 0; i < options.workers; ++i) {
    c->workers_.emplace_back();
    c->StartWorker(i);
  }
  if (!c->WaitForWorkers(options.workers, std::chrono::seconds(20))) {
    throw std::runtime_error("workers did not register: " + c->DumpLogs());
  }
  return c;
}

void TestCluster::StartBroker(int i) {
  std::string cfg = dir_ + "/broker" + std::to_string(i) + ".yaml";
  std::ostringstream y;
  y << "broker:\n"
    << "  id: broker-" << i << "\n"
    << "  http: {listen: \"127.0.0.1:" << http_ports_[i] << "\", threads: 32"
    << options_.broker_http_fields << "}\n"
    << "  workers: {endpoint: \"tcp://127.0.0.1:" << zmq_ports_[i]
    << "\", heartbeat_interval_ms: 200, heartbeat_liveness: 5}\n"
    << "  clients: {endpoint: \"tcp://127.0.0.1:" << client_ports_[i] << "\""
    << options_.broker_clients_fields << "}\n"
    << "  redis: {url: \"redis://127.0.0.1:" << redis_port_ << "\"}\n"
    << "limits:\n"
    << "  default: {timeout_ms: 10000, max_output_bytes: 65536}\n"
    << "  max: {timeout_ms: 60000, max_output_bytes: " << options_.max_output_bytes << "}\n"
    << "  max_code_bytes: " << options_.max_code_bytes << "\n"
    << "tenants:\n"
    << "  - {name: tenant-a, tokens: [\"" << kToken << "\"], secrets: ["
    << SecretsList(options_.tenant_a_secrets) << "], enabled: true, auto_approve: true"
    << options_.tenant_a_fields << "}\n"
    << "  - {name: tenant-b, tokens: [\"" << kOtherToken << "\"], enabled: true, auto_approve: true"
    << options_.tenant_b_fields << "}\n"
    << options_.extra_tenants_yaml << "admin_tokens: [\"" << kAdminToken << "\"]\n"
    << options_.extra_broker_yaml << options_.broker_log_yaml;
  WriteFile(cfg, y.str());
  if (static_cast<int>(brokers_.size()) <= i) brokers_.resize(i + 1);
  brokers_[i] = ChildProcess::Start({kBin + "kiln-broker", "--config", cfg},
                                    dir_ + "/broker" + std::to_string(i) + ".log");
}

std::string TestCluster::worker_config(int i) const {
  return dir_ + "/worker" + std::to_string(i) + ".yaml";
}

void TestCluster::StartWorker(int i) {
  std::ostringstream y;
  std::string suffix = dir_.substr(dir_.rfind('-') + 1);
  y << "worker:\n"
    << "  id: w" << i << "-" << suffix << "\n"
    << "  slots: " << options_.slots << "\n"
    << "  warm_per_runtime: " << options_.warm_per_runtime << "\n"
    << "  heartbeat_interval_ms: 200\n"
    << "  heartbeat_liveness: 5\n"
    << "  brokers: [";
  for (size_t b = 0; b < zmq_ports_.size(); ++b) {
    y << (b ? ", " : "") << "\"tcp://127.0.0.1:" << zmq_ports_[b] << "\"";
  }
  y << "]\n"
    << options_.extra_worker_yaml << "sandbox:\n"
    << "  state_dir: " << dir_ << "/w" << i << "\n"
    << "  cgroup_prefix: kiln-it-" << suffix << "-w" << i << "\n"
    << "  uid_base: " << kUidBase + 10000 * i << "\n"
    << "  uid_count: 10000\n"
    << "  cgroup_mode: " << options_.cgroup_mode << "\n"
    << options_.extra_sandbox_yaml << options_.worker_log_yaml;
  WriteFile(worker_config(i), y.str());
  workers_.at(i) =
      ChildProcess::Start({kBin + "kiln-worker", "--config", worker_config(i)},
                          dir_ + "/worker" + std::to_string(i) + ".log", options_.worker_env);
}

TestCluster::~TestCluster() {
  for (auto& w : workers_) w.Stop();
  for (auto& b : brokers_) b.Stop();
  redis_.Stop();
  if (getenv("KILN_KEEP_TEST_DIR") == nullptr) RemoveTree(dir_);
}

std::string TestCluster::RedisCli(const std::string& args) const {
  const std::string cmd = "redis-cli -p " + std::to_string(redis_port_) + " " + args;
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = ::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ::pclose(p);
  return out;
}

std::string TestCluster::url(int broker) const {
  return "http://127.0.0.1:" + std::to_string(http_ports_.at(broker));
}

HttpReply TestCluster::Request(const std::string& method, const std::string& path,
                               const std::string& body, const std::string& token, int broker,
                               const httplib::Headers& extra) {
  httplib::Client cli("127.0.0.1", http_ports_.at(broker));
  cli.set_read_timeout(120, 0);
  cli.set_connection_timeout(2, 0);
  httplib::Headers headers = extra;
  if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
  httplib::Result r = method == "GET" ? cli.Get(path.c_str(), headers)
                      : method == "DELETE"
                          ? cli.Delete(path.c_str(), headers)
                          : cli.Post(path.c_str(), headers, body, "application/json");
  HttpReply reply;
  if (!r) return reply;
  reply.status = r->status;
  reply.raw = r->body;
  reply.headers = r->headers;
  reply.body = nlohmann::json::parse(r->body, nullptr, false);
  return reply;
}

HttpReply TestCluster::Submit(const nlohmann::json& request, const std::string& token, int broker) {
  return Request("POST", "/v1/executions", request.dump(), token, broker);
}

bool TestCluster::WaitForWorkers(int n, std::chrono::milliseconds timeout) {
  return WaitFor(
      [&] {
        for (size_t b = 0; b < brokers_.size(); ++b) {
          auto r = Request("GET", "/v1/workers", "", kAdminToken, static_cast<int>(b));
          if (r.status != 200 || static_cast<int>(r.body["workers"].size()) < n) return false;
        }
        return true;
      },
      timeout);
}

std::string TestCluster::DumpLogs() const {
  std::ostringstream out;
  DIR* d = opendir(dir_.c_str());
  if (d == nullptr) return "";
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.size() > 4 && name.substr(name.size() - 4) == ".log") {
      std::string text = ReadFile(dir_ + "/" + name);
      if (text.size() > 8000) text = "..." + text.substr(text.size() - 8000);
      out << "==== " << name << " ====\n" << text << "\n";
    }
  }
  closedir(d);
  return out.str();
}

}  // namespace kiln::testing
