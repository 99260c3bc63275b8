#include "tests/support/cluster.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "common/curve/curve_keys.hpp"
#include "tests/support/rogue_worker.hpp"

namespace kiln::testing {
namespace {

// The kiln-broker and kiln-worker to run: this build's, or those of
// $KILN_TEST_BIN_DIR (e.g. another build's bin/, to compare two trees).
std::string BinDir() {
  const char* dir = getenv("KILN_TEST_BIN_DIR");
  return (dir != nullptr && *dir != '\0' ? std::string(dir)
                                         : std::string(KILN_BINARY_DIR) + "/bin") +
         "/";
}

std::string SecretsList(const std::vector<std::string>& secrets) {
  std::string out;
  for (const auto& s : secrets) out += (out.empty() ? "" : ", ") + nlohmann::json(s).dump();
  return out;
}

// Reads RESP replies from a socket, waiting at most until `deadline`.
class RespReader {
 public:
  RespReader(int fd, std::chrono::steady_clock::time_point deadline)
      : fd_(fd), deadline_(deadline) {}

  bool Read(RedisValue* out, int depth = 0) {
    std::string line;
    if (depth > 8 || !Line(&line) || line.empty()) return false;
    const char kind = line[0];
    const std::string rest = line.substr(1);
    switch (kind) {
      case '+':
        out->type = RedisValue::Type::kStatus;
        out->str = rest;
        return true;
      case '-':
        out->type = RedisValue::Type::kError;
        out->str = rest;
        return true;
      case ':':
        out->type = RedisValue::Type::kInteger;
        out->integer = std::strtoll(rest.c_str(), nullptr, 10);
        return true;
      case '$': {
        const long long n = std::strtoll(rest.c_str(), nullptr, 10);
        if (n < 0) {
          out->type = RedisValue::Type::kNil;
          return true;
        }
        out->type = RedisValue::Type::kString;
        if (!Bytes(static_cast<size_t>(n) + 2, &out->str)) return false;
        out->str.resize(static_cast<size_t>(n));
        return true;
      }
      case '*': {
        const long long n = std::strtoll(rest.c_str(), nullptr, 10);
        if (n < 0) {
          out->type = RedisValue::Type::kNil;
          return true;
        }
        out->type = RedisValue::Type::kArray;
        out->elements.resize(static_cast<size_t>(n));
        for (auto& e : out->elements) {
          if (!Read(&e, depth + 1)) return false;
        }
        return true;
      }
      default:
        return false;
    }
  }

 private:
  bool Fill() {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline_ - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    char chunk[65536];
    const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n <= 0) return false;
    buf_.append(chunk, static_cast<size_t>(n));
    return true;
  }
  bool Line(std::string* line) {
    size_t at;
    while ((at = buf_.find("\r\n", pos_)) == std::string::npos) {
      if (!Fill()) return false;
    }
    *line = buf_.substr(pos_, at - pos_);
    pos_ = at + 2;
    return true;
  }
  bool Bytes(size_t n, std::string* out) {
    while (buf_.size() - pos_ < n) {
      if (!Fill()) return false;
    }
    *out = buf_.substr(pos_, n);
    pos_ += n;
    return true;
  }

  int fd_;
  std::chrono::steady_clock::time_point deadline_;
  std::string buf_;
  size_t pos_ = 0;
};

RedisValue ConnectionError(const std::string& what) {
  RedisValue v;
  v.type = RedisValue::Type::kError;
  v.str = "connection: " + what;
  return v;
}

}  // namespace

// A worker killed inside the few milliseconds in which it stops a session
// on cgroup v1 (freezer frozen, SIGSTOP to each process, thawed) leaves that
// sandbox frozen, and a frozen task dies of its pending SIGKILL only once
// thawed. A worker restarted with the same cgroup_prefix thaws it
// (CleanupStale); each test cluster has a prefix of its own, so it thaws
// its own leftovers when it stops, before they can outlive it and be
// counted by a later test.
void ThawLeftoverSandboxes(const std::string& prefix) {
  const std::string root = "/sys/fs/cgroup/freezer";
  DIR* top = ::opendir(root.c_str());
  if (top == nullptr) return;
  while (dirent* e = ::readdir(top)) {
    std::string name = e->d_name;
    if (name.rfind(prefix, 0) != 0) continue;
    DIR* worker = ::opendir((root + "/" + name).c_str());
    if (worker == nullptr) continue;
    while (dirent* s = ::readdir(worker)) {
      if (s->d_name[0] == '.') continue;
      FILE* f = ::fopen((root + "/" + name + "/" + s->d_name + "/freezer.state").c_str(), "w");
      if (f == nullptr) continue;
      ::fputs("THAWED", f);
      ::fclose(f);
    }
    ::closedir(worker);
  }
  ::closedir(top);
}

std::unique_ptr<TestCluster> TestCluster::Start(const ClusterOptions& options) {
  std::unique_ptr<TestCluster> c(new TestCluster());
  c->options_ = options;
  c->dir_ = MakeTempDir("kiln-it");
  c->redis_port_ = FreePort();
  if (options.curve || options.curve_clients) c->MakeKeys();
  c->StartRedis();
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

void TestCluster::MakeKeys() {
  auto make = [&](const std::string& name) { return NewKeyFiles(keys_dir(), name); };
  ::mkdir(keys_dir().c_str(), 0700);
  ::mkdir(accepted_keys_dir().c_str(), 0700);
  make("broker");
  for (int i = 0; i < options_.workers; ++i) {
    const auto kp = make(worker_id(i));
    WriteFile(accepted_keys_dir() + "/" + worker_id(i) + ".pub", kp.public_z85 + "\n");
  }
}

void TestCluster::StartRedis() {
  std::vector<std::string> argv = {"/usr/bin/redis-server",
                                   "--port",
                                   std::to_string(redis_port_),
                                   "--bind",
                                   "127.0.0.1",
                                   "--dir",
                                   dir_,
                                   "--save",
                                   "",
                                   "--appendonly",
                                   "yes",
                                   "--daemonize",
                                   "no"};
  if (!options_.redis_appendfsync.empty()) {
    argv.insert(argv.end(), {"--appendfsync", options_.redis_appendfsync});
  }
  redis_ = ChildProcess::Start(argv, dir_ + "/redis.log");
}

bool TestCluster::RestartRedis(std::chrono::milliseconds timeout) {
  StartRedis();
  return WaitFor(
      [&] {
        RedisValue pong = RedisCommand({"PING"}, std::chrono::milliseconds(500));
        return pong.type == RedisValue::Type::kStatus && pong.str == "PONG";
      },
      timeout);
}

std::string TestCluster::worker_id(int i) const {
  return "w" + std::to_string(i) + "-" + dir_.substr(dir_.rfind('-') + 1);
}

void TestCluster::StartBroker(int i) {
  std::string cfg = dir_ + "/broker" + std::to_string(i) + ".yaml";
  std::ostringstream y;
  y << "broker:\n"
    << "  id: broker-" << i << "\n"
    << "  http: {listen: \"127.0.0.1:" << http_ports_[i] << "\", threads: 32"
    << options_.broker_http_fields << "}\n"
    << "  workers: {endpoint: \"tcp://127.0.0.1:" << zmq_ports_[i]
    << "\", heartbeat_interval_ms: " << options_.heartbeat_interval_ms
    << ", heartbeat_liveness: " << options_.heartbeat_liveness
    << (options_.curve ? ", secret_key_file: \"" + keys_dir() +
                             "/broker.key\", accepted_keys_dir: \"" + accepted_keys_dir() + "\""
                       : std::string())
    << "}\n"
    << "  clients: {endpoint: \"tcp://127.0.0.1:" << client_ports_[i] << "\""
    << (options_.curve_clients ? ", secret_key_file: \"" + keys_dir() + "/broker.key\""
                               : std::string())
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
  brokers_[i] = ChildProcess::Start({BinDir() + "kiln-broker", "--config", cfg},
                                    dir_ + "/broker" + std::to_string(i) + ".log");
}

std::string TestCluster::worker_config(int i) const {
  return dir_ + "/worker" + std::to_string(i) + ".yaml";
}

void TestCluster::StartWorker(int i) {
  std::ostringstream y;
  std::string suffix = dir_.substr(dir_.rfind('-') + 1);
  y << "worker:\n"
    << "  id: " << worker_id(i) << "\n"
    << "  slots: " << options_.slots << "\n"
    << "  warm_per_runtime: " << options_.warm_per_runtime << "\n"
    << "  heartbeat_interval_ms: " << options_.heartbeat_interval_ms << "\n"
    << "  heartbeat_liveness: " << options_.heartbeat_liveness << "\n"
    << "  brokers: [";
  for (size_t b = 0; b < zmq_ports_.size(); ++b) {
    y << (b ? ", " : "") << "\"tcp://127.0.0.1:" << zmq_ports_[b] << "\"";
  }
  y << "]\n";
  if (options_.curve) {
    y << "  secret_key_file: \"" << keys_dir() << "/" << worker_id(i) << ".key\"\n"
      << "  broker_key_file: \"" << keys_dir() << "/broker.pub\"\n";
  }
  y << options_.extra_worker_yaml << "sandbox:\n"
    << "  state_dir: " << dir_ << "/w" << i << "\n"
    << "  cgroup_prefix: kiln-it-" << suffix << "-w" << i << "\n"
    << "  uid_base: " << kUidBase + 10000 * i << "\n"
    << "  uid_count: 10000\n"
    << "  cgroup_mode: " << options_.cgroup_mode << "\n"
    << options_.extra_sandbox_yaml
    << (i < static_cast<int>(options_.worker_sandbox_yaml.size()) ? options_.worker_sandbox_yaml[i]
                                                                  : std::string())
    << options_.extra_worker_top_yaml << options_.worker_log_yaml;
  WriteFile(worker_config(i), y.str());
  workers_.at(i) =
      ChildProcess::Start({BinDir() + "kiln-worker", "--config", worker_config(i)},
                          dir_ + "/worker" + std::to_string(i) + ".log", options_.worker_env);
}

TestCluster::~TestCluster() {
  for (auto& w : workers_) w.Stop();
  ThawLeftoverSandboxes("kiln-it-" + dir_.substr(dir_.rfind('-') + 1) + "-w");
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

RedisValue TestCluster::RedisCommand(const std::vector<std::string>& argv,
                                     std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ConnectionError("socket");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  timeval tv{static_cast<time_t>(timeout.count() / 1000),
             static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(redis_port_));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    return ConnectionError("cannot connect");
  }
  std::string request = "*" + std::to_string(argv.size()) + "\r\n";
  for (const auto& a : argv) request += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return ConnectionError("send failed");
    sent += static_cast<size_t>(n);
  }
  RedisValue reply;
  RespReader reader(fd, deadline);
  if (!reader.Read(&reply)) return ConnectionError("no complete reply in time");
  return reply;
}

std::vector<StoredChunk> TestCluster::OutputChunks(const std::string& job_id) const {
  std::vector<StoredChunk> out;
  RedisValue r = RedisCommand({"XRANGE", "{kiln}:out:" + job_id, "-", "+"});
  if (r.type != RedisValue::Type::kArray) return out;
  for (const RedisValue& e : r.elements) {
    if (e.elements.size() != 2) continue;
    StoredChunk c;
    c.entry_id = e.elements[0].str;
    const auto& f = e.elements[1].elements;
    for (size_t i = 0; i + 1 < f.size(); i += 2) {
      const std::string& value = f[i + 1].str;
      if (f[i].str == "stream") {
        c.stream = value;
      } else if (f[i].str == "seq") {
        c.seq = std::strtoll(value.c_str(), nullptr, 10);
      } else if (f[i].str == "offset") {
        c.offset = std::strtoll(value.c_str(), nullptr, 10);
      } else if (f[i].str == "data") {
        c.data = value;
      }
    }
    out.push_back(std::move(c));
  }
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
