// Grafana dashboards, Prometheus alert rules and the deploy files.
//
// Statically: every dashboard is valid JSON with unique panel ids and a
// Prometheus `datasource` variable that every panel and query uses; the
// Grafana provisioning, compose and Kubernetes files point at the dashboards;
// every YAML file under deploy/ parses and the Kiln configs in it load; the
// deploy files hand the CURVE keys to the paths the configs name.
//
// Live: a real cluster (1 broker, 2 workers) runs a short load while a real
// Prometheus (Debian package `prometheus`) scrapes it every second with the
// scrape config of deploy/prometheus/prometheus.yml and the rules of
// deploy/prometheus/alerts.yml. Then EVERY query of EVERY dashboard panel must
// return series through /api/v1/query (so dashboards cannot rot when a metric
// or label changes), the alerts must all be quiet, and after both workers are
// gone (one killed, one stopped) the worker alerts must fire.
#include <gtest/gtest.h>
#include <signal.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "broker/config.hpp"
#include "broker/store/redis_endpoint.hpp"
#include "common/curve/curve_keys.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/rogue_worker.hpp"
#include "worker/config.hpp"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

const std::string kSrc = KILN_SOURCE_DIR;
const std::string kDashboards = kSrc + "/dashboards";
const std::string kPrometheus = "/usr/bin/prometheus";
constexpr const char* kSecret = "kiln-dashboards-secret-7";

// Values Grafana gives its built-in variables, for evaluating panel queries.
const std::map<std::string, std::string> kBuiltins = {
    {"__rate_interval", "1m"}, {"__interval", "15s"}, {"__interval_ms", "15000"},
    {"__range", "5m"},         {"__range_s", "300"},  {"__range_ms", "300000"},
};

// ---------------------------------------------------------------- helpers

std::vector<std::string> DashboardFiles() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(kDashboards)) {
    if (e.path().extension() == ".json") out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

json LoadDashboard(const std::string& file) {
  return json::parse(ReadFile(kDashboards + "/" + file), nullptr, false);
}

// Every panel, the panels inside rows included.
void CollectPanels(const json& panels, std::vector<json>* out) {
  if (!panels.is_array()) return;
  for (const auto& p : panels) {
    out->push_back(p);
    if (p.contains("panels")) CollectPanels(p["panels"], out);
  }
}

bool UsesDatasourceVariable(const json& ds) {
  return ds.is_object() && ds.value("type", "") == "prometheus" &&
         ds.value("uid", "") == "${datasource}";
}

std::string PanelName(const std::string& file, const json& panel) {
  return file + " panel " + std::to_string(panel.value("id", -1)) + " \"" +
         panel.value("title", "") + "\"";
}

// A query variable's query, whichever form Grafana stored it in.
std::string VariableQuery(const json& var) {
  const json& q = var.contains("query") ? var["query"] : json();
  if (q.is_string()) return q.get<std::string>();
  if (q.is_object()) return q.value("query", "");
  return "";
}

// Replaces $name, ${name}, ${name:format} and [[name]] by `values`; nullopt
// (with the name in *unknown) if a variable has no value.
std::optional<std::string> Substitute(const std::string& text,
                                      const std::map<std::string, std::string>& values,
                                      std::string* unknown) {
  static const std::regex kVar(
      R"(\$\{([A-Za-z0-9_]+)(?::[^}]*)?\}|\[\[([A-Za-z0-9_]+)\]\]|\$([A-Za-z0-9_]+))");
  std::string out;
  auto begin = std::sregex_iterator(text.begin(), text.end(), kVar);
  size_t last = 0;
  for (auto it = begin; it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    std::string name = m[1].matched ? m[1].str() : m[2].matched ? m[2].str() : m[3].str();
    auto v = values.find(name);
    if (v == values.end()) {
      *unknown = name;
      return std::nullopt;
    }
    out += text.substr(last, m.position(0) - last) + v->second;
    last = m.position(0) + m.length(0);
  }
  return out + text.substr(last);
}

int SecondsOf(const std::string& duration) {  // "90s", "2m"
  if (duration.empty()) return -1;
  int n = std::atoi(duration.c_str());
  return duration.back() == 'm' ? n * 60 : n;
}

int PortOf(const std::string& host_port) {
  return std::atoi(host_port.substr(host_port.rfind(':') + 1).c_str());
}

// A temp dir removed at the end of the scope, whatever the test's outcome.
struct ScopedTempDir {
  ScopedTempDir() = default;
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;
  ScopedTempDir(ScopedTempDir&&) = delete;
  ScopedTempDir& operator=(ScopedTempDir&&) = delete;
  ~ScopedTempDir() { RemoveTree(path); }
  std::string path = MakeTempDir("kiln-deploy");
};

// YAML text -> a temp file, for the config loaders.
std::string WriteTemp(const std::string& dir, const std::string& name, const std::string& text) {
  WriteFile(dir + "/" + name, text);
  return dir + "/" + name;
}

// The first document of `file` whose kind (and name, if given) match.
YAML::Node FindK8s(const std::string& file, const std::string& kind, const std::string& name = "") {
  const fs::path path = fs::path(kSrc) / "deploy/k8s" / file;
  for (const YAML::Node& doc : YAML::LoadAllFromFile(path.string())) {
    if (doc["kind"] && doc["kind"].as<std::string>() == kind &&
        (name.empty() || doc["metadata"]["name"].as<std::string>() == name)) {
      return doc;
    }
  }
  return YAML::Node();
}

// `text`, a Kiln config, with each key file it names replaced by a fresh key
// pair of the same name in `dir`, and accepted_keys_dir by `dir` (the real
// keys are made at deploy time; the worker's loader reads its keys). *named
// gets each setting's original path.
std::string WithTempKeys(const std::string& text, const std::string& dir,
                         std::map<std::string, std::string>* named) {
  fs::create_directories(dir);
  static const std::regex kLine(
      R"re(^(\s*)(secret_key_file|broker_key_file|accepted_keys_dir):(\s*)"?([^"\s#]+)"?(.*)$)re");
  std::string out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_match(line, m, kLine)) {
      const std::string setting = m[2].str(), path = m[4].str();
      (*named)[setting] = path;
      std::string replacement = dir;
      if (setting != "accepted_keys_dir") {
        const std::string file = fs::path(path).filename().string();
        const std::string stem = fs::path(file).stem().string();
        if (!fs::exists(dir + "/" + stem + ".key")) NewKeyFiles(dir, stem);
        replacement = dir + "/" + file;
      }
      line = m[1].str() + setting + ":" + m[3].str() + "\"" + replacement + "\"" + m[5].str();
    }
    out += line + "\n";
  }
  return out;
}

// A compose service's named volumes: mount target -> volume name.
std::map<std::string, std::string> NamedVolumes(const YAML::Node& service) {
  std::map<std::string, std::string> out;
  for (const auto& v : service["volumes"]) {
    const std::string spec = v.as<std::string>();
    const size_t colon = spec.find(':');
    if (colon == std::string::npos || spec[0] == '.' || spec[0] == '/') continue;
    const std::string target = spec.substr(colon + 1);
    out[target.substr(0, target.find(':'))] = spec.substr(0, colon);
  }
  return out;
}

// The named volume of a pod spec (a StatefulSet's or DaemonSet's template).
YAML::Node PodVolume(const YAML::Node& pod, const std::string& name) {
  for (const auto& v : pod["volumes"]) {
    if (v["name"].as<std::string>() == name) return v;
  }
  return YAML::Node();
}

// ---------------------------------------------------------------- Prometheus

// Prometheus's HTTP API on 127.0.0.1:port.
class PrometheusApi {
 public:
  explicit PrometheusApi(int port) : port_(port) {}

  // POST /api/v1/query at the current time: the parsed answer
  // ({"status": "success", "data": ...} or {"status": "error", "error": ...}).
  json Query(const std::string& expr) const { return Post("/api/v1/query", {{"query", expr}}); }

  // Values of `label` over the series `selector` matches (Grafana's label_values()).
  std::set<std::string> LabelValues(const std::string& selector, const std::string& label) const {
    json r = Post("/api/v1/series", {{"match[]", selector}});
    std::set<std::string> out;
    if (r.value("status", "") != "success") return out;
    for (const auto& s : r["data"]) {
      if (s.contains(label)) out.insert(s[label].get<std::string>());
    }
    return out;
  }

  json Get(const std::string& path) const {
    httplib::Client cli("127.0.0.1", port_);
    cli.set_read_timeout(10, 0);
    auto r = cli.Get(path.c_str());
    if (!r) return json();
    return json::parse(r->body, nullptr, false);
  }

  bool Ready() const {
    httplib::Client cli("127.0.0.1", port_);
    cli.set_connection_timeout(1, 0);
    auto r = cli.Get("/-/ready");
    return r && r->status == 200;
  }

  // The single number an instant query returns, or NaN.
  double Scalar(const std::string& expr) const {
    json r = Query(expr);
    if (r.value("status", "") != "success" || r["data"]["result"].size() != 1) return std::nan("");
    return std::stod(r["data"]["result"][0]["value"][1].get<std::string>());
  }

 private:
  json Post(const std::string& path, const httplib::Params& params) const {
    httplib::Client cli("127.0.0.1", port_);
    cli.set_read_timeout(10, 0);
    auto r = cli.Post(path.c_str(), params);
    if (!r) return {{"status", "error"}, {"error", "no answer from Prometheus"}};
    json body = json::parse(r->body, nullptr, false);
    if (body.is_discarded()) {
      return {{"status", "error"}, {"error", "HTTP " + std::to_string(r->status) + ": " + r->body}};
    }
    return body;
  }

  int port_;
};

// Why an instant query's answer is unusable for a panel: "" when it holds at
// least one series with a number.
std::string ResultProblem(const json& reply) {
  if (reply.value("status", "") != "success") {
    return "error: " + (reply.contains("error") ? reply["error"].dump() : reply.dump());
  }
  const json& data = reply["data"];
  const std::string type = data.value("resultType", "");
  if (type == "scalar" || type == "string") return "";
  if (!data["result"].is_array() || data["result"].empty()) return "no series";
  for (const auto& series : data["result"]) {
    if (series.contains("value") && series["value"][1] != "NaN") return "";
  }
  return "only NaN: " + data["result"].dump();
}

// Names and expressions of the alerting rules in alerts.yml.
std::vector<std::pair<std::string, std::string>> AlertRules() {
  std::vector<std::pair<std::string, std::string>> out;
  YAML::Node root = YAML::LoadFile(kSrc + "/deploy/prometheus/alerts.yml");
  for (const auto& group : root["groups"]) {
    for (const auto& rule : group["rules"]) {
      if (rule["alert"])
        out.emplace_back(rule["alert"].as<std::string>(), rule["expr"].as<std::string>());
    }
  }
  return out;
}

// deploy/prometheus/prometheus.yml with this cluster's targets, a 1 s scrape
// and evaluation interval, and absolute rule file paths. Only the kiln-broker
// and kiln-worker jobs are kept; both must be there.
std::string PrometheusConfig(const std::string& broker_target,
                             const std::vector<std::string>& worker_targets) {
  YAML::Node cfg = YAML::LoadFile(kSrc + "/deploy/prometheus/prometheus.yml");
  cfg["global"]["scrape_interval"] = "1s";
  cfg["global"]["scrape_timeout"] = "1s";
  cfg["global"]["evaluation_interval"] = "1s";
  YAML::Node rules(YAML::NodeType::Sequence);
  for (const auto& r : cfg["rule_files"]) {
    rules.push_back(kSrc + "/deploy/prometheus/" + r.as<std::string>());
  }
  cfg["rule_files"] = rules;
  YAML::Node scrapes(YAML::NodeType::Sequence);
  std::set<std::string> jobs;
  for (const auto& sc : cfg["scrape_configs"]) {
    const std::string name = sc["job_name"].as<std::string>();
    std::vector<std::string> targets;
    if (name == "kiln-broker") {
      targets = {broker_target};
    } else if (name == "kiln-worker") {
      targets = worker_targets;
    } else {
      continue;
    }
    jobs.insert(name);
    YAML::Node job = YAML::Clone(sc);
    for (const char* key :
         {"static_configs", "file_sd_configs", "scrape_interval", "scrape_timeout"}) {
      job.remove(key);
    }
    YAML::Node static_config;
    static_config["targets"] = targets;
    job["static_configs"].push_back(static_config);
    scrapes.push_back(job);
  }
  if (jobs.size() != 2) {
    throw std::runtime_error(
        "deploy/prometheus/prometheus.yml lacks job kiln-broker or kiln-worker");
  }
  cfg["scrape_configs"] = scrapes;
  YAML::Emitter out;
  out << cfg;
  return out.c_str();
}

// ---------------------------------------------------------------- static checks

TEST(DashboardsTest, AreValidWithUniqueIdsAndTheDatasourceVariable) {
  const std::vector<std::string> files = DashboardFiles();
  for (const char* required : {"kiln-fleet.json", "kiln-tenant.json", "kiln-worker.json"}) {
    EXPECT_TRUE(std::count(files.begin(), files.end(), required))
        << "missing dashboards/" << required;
  }
  std::set<std::string> uids;
  for (const auto& file : files) {
    SCOPED_TRACE(file);
    json doc = LoadDashboard(file);
    ASSERT_FALSE(doc.is_discarded()) << file << " is not valid JSON";
    ASSERT_TRUE(doc.is_object());
    EXPECT_GE(doc.value("schemaVersion", 0), 38) << "Grafana 10+ schema";
    EXPECT_FALSE(doc.value("title", "").empty());
    EXPECT_TRUE(uids.insert(doc.value("uid", "")).second) << "duplicate or empty uid";

    bool datasource_var = false;
    for (const auto& var : doc["templating"]["list"]) {
      const std::string name = var.value("name", "");
      if (var.value("type", "") == "datasource") {
        datasource_var =
            datasource_var || (name == "datasource" && var.value("query", "") == "prometheus");
      } else if (var.value("type", "") == "query") {
        EXPECT_TRUE(UsesDatasourceVariable(var["datasource"])) << "variable " << name;
        EXPECT_FALSE(VariableQuery(var).empty()) << "variable " << name;
      }
    }
    EXPECT_TRUE(datasource_var) << "no `datasource` variable of type datasource / prometheus";

    std::vector<json> panels;
    CollectPanels(doc["panels"], &panels);
    EXPECT_GE(panels.size(), 5u);
    std::set<int> ids;
    size_t queries = 0;
    for (const auto& p : panels) {
      const std::string where = PanelName(file, p);
      ASSERT_TRUE(p.contains("id") && p["id"].is_number_integer()) << where << ": no integer id";
      EXPECT_TRUE(ids.insert(p["id"].get<int>()).second) << where << ": duplicate panel id";
      EXPECT_TRUE(p.contains("gridPos") && p["gridPos"].contains("w") && p["gridPos"].contains("h"))
          << where;
      if (p.value("type", "") == "row") continue;
      EXPECT_TRUE(UsesDatasourceVariable(p["datasource"])) << where << ": datasource";
      ASSERT_TRUE(p.contains("targets") && p["targets"].is_array() && !p["targets"].empty())
          << where << ": no query";
      std::set<std::string> refs;
      for (const auto& t : p["targets"]) {
        EXPECT_TRUE(UsesDatasourceVariable(t["datasource"])) << where << ": target datasource";
        EXPECT_FALSE(t.value("expr", "").empty()) << where << ": empty expr";
        EXPECT_TRUE(refs.insert(t.value("refId", "")).second) << where << ": duplicate refId";
        ++queries;
      }
    }
    EXPECT_GE(queries, 5u);
  }
}

TEST(DashboardsTest, ProvisioningComposeAndKubernetesPointAtThem) {
  const std::string deploy = kSrc + "/deploy";
  YAML::Node sources = YAML::LoadFile(deploy + "/grafana/provisioning/datasources/prometheus.yaml");
  ASSERT_TRUE(sources["datasources"].IsSequence());
  std::string prometheus_url;
  for (const auto& ds : sources["datasources"]) {
    if (ds["type"].as<std::string>() == "prometheus") prometheus_url = ds["url"].as<std::string>();
  }
  EXPECT_EQ(prometheus_url, "http://prometheus:9090") << "the compose service `prometheus`";

  YAML::Node providers = YAML::LoadFile(deploy + "/grafana/provisioning/dashboards/kiln.yaml");
  ASSERT_EQ(providers["providers"].size(), 1u);
  YAML::Node provider = providers["providers"][0];
  EXPECT_EQ(provider["type"].as<std::string>(), "file");
  const std::string path = provider["options"]["path"].as<std::string>();

  // docker-compose.yml mounts dashboards/ at that path and the provisioning
  // folder where Grafana reads it; Prometheus gets its config and the rule
  // files next to each other (rule_files are relative to the config).
  YAML::Node compose = YAML::LoadFile(deploy + "/compose/docker-compose.yml");
  for (const char* service : {"redis", "broker", "worker", "prometheus", "grafana"}) {
    EXPECT_TRUE(compose["services"][service]) << "compose service " << service;
  }
  std::map<std::string, fs::path> grafana_mounts, prometheus_mounts;  // container path -> host path
  auto mounts = [&](const char* service, std::map<std::string, fs::path>* out) {
    for (const auto& v : compose["services"][service]["volumes"]) {
      std::string spec = v.as<std::string>();
      std::vector<std::string> parts;
      std::stringstream in(spec);
      for (std::string part; std::getline(in, part, ':');) parts.push_back(part);
      if (parts.size() >= 2 && parts[0].rfind('.', 0) == 0) {
        (*out)[parts[1]] = fs::weakly_canonical(fs::path(deploy + "/compose") / parts[0]);
      }
    }
  };
  mounts("grafana", &grafana_mounts);
  mounts("prometheus", &prometheus_mounts);
  ASSERT_TRUE(grafana_mounts.count(path)) << "compose does not mount anything at " << path;
  EXPECT_EQ(grafana_mounts[path], fs::canonical(kDashboards));
  EXPECT_EQ(grafana_mounts["/etc/grafana/provisioning"],
            fs::canonical(deploy + "/grafana/provisioning"));
  EXPECT_EQ(prometheus_mounts["/etc/prometheus/prometheus.yml"],
            fs::canonical(deploy + "/prometheus/prometheus.yml"));
  for (const auto& r : YAML::LoadFile(deploy + "/prometheus/prometheus.yml")["rule_files"]) {
    const std::string name = r.as<std::string>();
    const fs::path file = fs::path(deploy) / "prometheus" / name;
    ASSERT_TRUE(fs::exists(file)) << name;
    EXPECT_EQ(prometheus_mounts["/etc/prometheus/" + name], fs::canonical(file));
  }

  // The Kubernetes ConfigMap generator packs every dashboard unchanged.
  ScopedTempDir dir;
  const std::string out = dir.path + "/generated.yaml";
  ASSERT_EQ(std::system(
                ("bash " + deploy + "/k8s/make-dashboards-configmap.sh test-ns > " + out).c_str()),
            0);
  YAML::Node cm = YAML::LoadFile(out);
  EXPECT_EQ(cm["kind"].as<std::string>(), "ConfigMap");
  EXPECT_EQ(cm["metadata"]["namespace"].as<std::string>(), "test-ns");
  EXPECT_EQ(cm["metadata"]["labels"]["grafana_dashboard"].as<std::string>(), "1");
  EXPECT_EQ(cm["data"].size(), DashboardFiles().size());
  for (const auto& file : DashboardFiles()) {
    ASSERT_TRUE(cm["data"][file]) << file;
    EXPECT_EQ(json::parse(cm["data"][file].as<std::string>(), nullptr, false), LoadDashboard(file))
        << file;
  }
  // ... and the PrometheusRule generator the rules of alerts.yml.
  ASSERT_EQ(std::system(("bash " + deploy + "/k8s/make-prometheusrule.sh > " + out).c_str()), 0);
  YAML::Node rule = YAML::LoadFile(out);
  EXPECT_EQ(rule["kind"].as<std::string>(), "PrometheusRule");
  YAML::Node alerts = YAML::LoadFile(deploy + "/prometheus/alerts.yml");
  EXPECT_EQ(YAML::Dump(rule["spec"]["groups"]), YAML::Dump(alerts["groups"]));
}

TEST(DeployFilesTest, ParseAndHoldValidConsistentKilnConfigs) {
  const std::string deploy = kSrc + "/deploy";
  size_t yaml_files = 0;
  for (const auto& e : fs::recursive_directory_iterator(deploy)) {
    const std::string ext = e.path().extension().string();
    if (ext != ".yml" && ext != ".yaml") continue;
    ++yaml_files;
    try {
      EXPECT_FALSE(YAML::LoadAllFromFile(e.path().string()).empty()) << e.path();
    } catch (const YAML::Exception& ex) {
      ADD_FAILURE() << e.path() << ": " << ex.what();
    }
  }
  EXPECT_GE(yaml_files, 10u);

  ScopedTempDir dir;
  // The example configs load as they are (their key settings are off).
  auto example_broker = broker::LoadBrokerConfig(deploy + "/config/broker.example.yaml");
  EXPECT_TRUE(example_broker.ok()) << example_broker.status().ToString();
  auto example_worker = worker::LoadWorkerConfig(deploy + "/config/worker.example.yaml");
  EXPECT_TRUE(example_worker.ok()) << example_worker.status().ToString();
  // compose (key files in temp copies: see WithTempKeys)
  std::map<std::string, std::string> compose_broker_keys, compose_worker_keys;
  auto compose_broker =
      broker::LoadBrokerConfig(WriteTemp(dir.path, "compose-broker.yaml",
                                         WithTempKeys(ReadFile(deploy + "/compose/broker.yaml"),
                                                      dir.path + "/cb", &compose_broker_keys)));
  ASSERT_TRUE(compose_broker.ok()) << compose_broker.status().ToString();
  auto compose_worker =
      worker::LoadWorkerConfig(WriteTemp(dir.path, "compose-worker.yaml",
                                         WithTempKeys(ReadFile(deploy + "/compose/worker.yaml"),
                                                      dir.path + "/cw", &compose_worker_keys)));
  ASSERT_TRUE(compose_worker.ok()) << compose_worker.status().ToString();
  // Kubernetes: the broker config is a Secret (it holds tokens), the worker's a ConfigMap.
  YAML::Node secret = FindK8s("broker.yaml", "Secret", "kiln-broker-config");
  ASSERT_TRUE(secret) << "deploy/k8s/broker.yaml: Secret kiln-broker-config";
  std::map<std::string, std::string> k8s_broker_keys, k8s_worker_keys;
  auto k8s_broker = broker::LoadBrokerConfig(
      WriteTemp(dir.path, "broker.yaml",
                WithTempKeys(secret["stringData"]["broker.yaml"].as<std::string>(),
                             dir.path + "/kb", &k8s_broker_keys)));
  ASSERT_TRUE(k8s_broker.ok()) << k8s_broker.status().ToString();
  YAML::Node cm = FindK8s("worker.yaml", "ConfigMap", "kiln-worker-config");
  ASSERT_TRUE(cm) << "deploy/k8s/worker.yaml: ConfigMap kiln-worker-config";
  auto k8s_worker =
      worker::LoadWorkerConfig(WriteTemp(dir.path, "worker.yaml",
                                         WithTempKeys(cm["data"]["worker.yaml"].as<std::string>(),
                                                      dir.path + "/kw", &k8s_worker_keys)));
  ASSERT_TRUE(k8s_worker.ok()) << k8s_worker.status().ToString();

  // CURVE on the worker links everywhere: no deploy file opts out.
  for (const auto* b : {&*compose_broker, &*k8s_broker}) {
    EXPECT_FALSE(b->worker_secret_key_file.empty());
    EXPECT_FALSE(b->worker_accepted_keys_dir.empty());
    EXPECT_FALSE(b->worker_allow_unauthenticated);
  }
  for (const auto* w : {&*compose_worker, &*k8s_worker}) {
    EXPECT_FALSE(w->curve_secret.empty());
    EXPECT_FALSE(w->curve_broker_public.empty());
  }

  // Prometheus scrapes the ports the compose configs listen on.
  YAML::Node prom = YAML::LoadFile(deploy + "/prometheus/prometheus.yml");
  std::map<std::string, std::string> targets;
  for (const auto& sc : prom["scrape_configs"]) {
    if (sc["static_configs"]) {
      targets[sc["job_name"].as<std::string>()] =
          sc["static_configs"][0]["targets"][0].as<std::string>();
    }
  }
  EXPECT_EQ(targets["kiln-broker"],
            "broker:" + std::to_string(PortOf(compose_broker->http.listen)));
  EXPECT_EQ(targets["kiln-worker"],
            "worker:" + std::to_string(PortOf(compose_worker->metrics_listen)));
  EXPECT_EQ(compose_worker->brokers,
            std::vector<std::string>{"tcp://broker:" +
                                     std::to_string(PortOf(compose_broker->worker_endpoint))});

  // SIGTERM drains a worker: every stop timeout must outlast the drain.
  YAML::Node compose = YAML::LoadFile(deploy + "/compose/docker-compose.yml");
  EXPECT_GT(SecondsOf(compose["services"]["worker"]["stop_grace_period"].as<std::string>()) * 1000,
            static_cast<int>(compose_worker->drain_timeout_ms));
  YAML::Node ds = FindK8s("worker.yaml", "DaemonSet");
  ASSERT_TRUE(ds);
  EXPECT_GT(ds["spec"]["template"]["spec"]["terminationGracePeriodSeconds"].as<int>() * 1000,
            static_cast<int>(k8s_worker->drain_timeout_ms));
  // The unit stops a worker configured with the default drain timeout.
  const uint32_t default_drain_ms = worker::WorkerConfig().drain_timeout_ms;
  std::smatch m;
  const std::string unit = ReadFile(deploy + "/systemd/kiln-worker.service");
  ASSERT_TRUE(std::regex_search(unit, m, std::regex(R"(\nTimeoutStopSec=(\d+[sm]?)\n)")));
  EXPECT_GT(SecondsOf(m[1].str()) * 1000, static_cast<int>(default_drain_ms));
  EXPECT_NE(unit.find("\nKillSignal=SIGTERM\n"), std::string::npos);

  // Kubernetes: each worker connects to every broker replica, by its own name.
  YAML::Node sts = FindK8s("broker.yaml", "StatefulSet", "kiln-broker");
  ASSERT_TRUE(sts);
  const int replicas = sts["spec"]["replicas"].as<int>();
  ASSERT_EQ(static_cast<int>(k8s_worker->brokers.size()), replicas);
  for (int i = 0; i < replicas; ++i) {
    EXPECT_EQ(k8s_worker->brokers[i],
              "tcp://kiln-broker-" + std::to_string(i) + "." +
                  sts["spec"]["serviceName"].as<std::string>() +
                  ".kiln.svc.cluster.local:" + std::to_string(PortOf(k8s_broker->worker_endpoint)));
  }
  // Every resource is in the repository, but keys/, which make-keys.sh writes.
  YAML::Node kustomization = YAML::LoadFile(deploy + "/k8s/kustomization.yaml");
  bool lists_keys = false;
  for (const auto& r : kustomization["resources"]) {
    const std::string name = r.as<std::string>();
    if (name == "keys") {
      lists_keys = true;
      continue;
    }
    EXPECT_TRUE(fs::exists(deploy + "/k8s/" + name)) << name;
  }
  EXPECT_TRUE(lists_keys) << "kustomization.yaml leaves out the keys make-keys.sh writes";

  // --- Keys in Kubernetes ---
  // make-keys.sh writes the Secrets and ConfigMaps the pods mount: real keys
  // (0600), one per node, named after it.
  const std::string keys = dir.path + "/k8s-keys";
  ASSERT_EQ(std::system(("KILN=" + std::string(KILN_BINARY_DIR) + "/bin/kiln bash " + deploy +
                         "/k8s/make-keys.sh --dir " + keys + " node-a node-b.example > " +
                         dir.path + "/make-keys.log 2>&1")
                            .c_str()),
            0)
      << ReadFile(dir.path + "/make-keys.log");
  std::map<std::string, std::set<std::string>> generated;  // name -> its files
  YAML::Node gen = YAML::LoadFile(keys + "/kustomization.yaml");
  for (const char* kind : {"secretGenerator", "configMapGenerator"}) {
    for (const auto& g : gen[kind]) {
      for (const auto& f : g["files"]) {
        ASSERT_TRUE(fs::exists(keys + "/" + f.as<std::string>())) << f.as<std::string>();
        generated[g["name"].as<std::string>()].insert(
            fs::path(f.as<std::string>()).filename().string());
      }
    }
  }
  EXPECT_EQ(generated["kiln-broker-key"], std::set<std::string>{"broker.key"});
  EXPECT_EQ(generated["kiln-broker-pub"], std::set<std::string>{"broker.pub"});
  EXPECT_EQ(generated["kiln-worker-keys"],
            (std::set<std::string>{"node-a.key", "node-b.example.key"}));
  EXPECT_EQ(generated["kiln-worker-pubkeys"],
            (std::set<std::string>{"node-a.pub", "node-b.example.pub"}));
  for (const char* key : {"/broker.key", "/workers/node-a.key"}) {
    EXPECT_TRUE((fs::status(keys + key).permissions() & fs::perms::mask) ==
                (fs::perms::owner_read | fs::perms::owner_write))
        << key << " is not 0600";
    EXPECT_TRUE(common::ReadCurveSecretKeyFile(keys + key).ok()) << key;
  }
  // The brokers: the key Secret copied by the init container to the config's
  // secret_key_file; the accepted keys read through kubelet's ..data (its
  // visible files are symlinks, which Kiln does not open).
  YAML::Node broker_pod = sts["spec"]["template"]["spec"];
  EXPECT_EQ(PodVolume(broker_pod, "broker-key")["secret"]["secretName"].as<std::string>(),
            "kiln-broker-key");
  EXPECT_EQ(PodVolume(broker_pod, "worker-pubkeys")["configMap"]["name"].as<std::string>(),
            "kiln-worker-pubkeys");
  ASSERT_TRUE(broker_pod["initContainers"] && broker_pod["initContainers"].size() == 1);
  EXPECT_NE(YAML::Dump(broker_pod["initContainers"][0]["command"])
                .find(k8s_broker_keys["secret_key_file"]),
            std::string::npos)
      << "the broker's init container does not write " << k8s_broker_keys["secret_key_file"];
  EXPECT_EQ(fs::path(k8s_broker_keys["accepted_keys_dir"]).filename().string(), "..data");
  bool mounts_pubkeys = false;
  for (const auto& m : broker_pod["containers"][0]["volumeMounts"]) {
    mounts_pubkeys |=
        m["name"].as<std::string>() == "worker-pubkeys" &&
        m["mountPath"].as<std::string>() + "/..data" == k8s_broker_keys["accepted_keys_dir"];
  }
  EXPECT_TRUE(mounts_pubkeys) << "accepted_keys_dir is not the worker-pubkeys mount's ..data";
  // The workers: their node's key and broker.pub, copied to the config's paths;
  // the id is the node name, and no surge pod ever doubles a node's id.
  YAML::Node worker_pod = ds["spec"]["template"]["spec"];
  EXPECT_EQ(PodVolume(worker_pod, "worker-keys")["secret"]["secretName"].as<std::string>(),
            "kiln-worker-keys");
  EXPECT_EQ(PodVolume(worker_pod, "broker-pub")["configMap"]["name"].as<std::string>(),
            "kiln-broker-pub");
  ASSERT_TRUE(worker_pod["initContainers"] && worker_pod["initContainers"].size() == 1);
  const std::string worker_init = YAML::Dump(worker_pod["initContainers"][0]["command"]);
  for (const char* setting : {"secret_key_file", "broker_key_file"}) {
    EXPECT_NE(worker_init.find(k8s_worker_keys[setting]), std::string::npos)
        << "the worker's init container does not write " << k8s_worker_keys[setting];
  }
  EXPECT_NE(worker_init.find("$NODE_NAME.key"), std::string::npos);
  EXPECT_NE(YAML::Dump(worker_pod["containers"][0]["args"]).find("$(NODE_NAME)"),
            std::string::npos);
  EXPECT_EQ(ds["spec"]["updateStrategy"]["rollingUpdate"]["maxSurge"].as<int>(), 0);
  // The Sentinel component: the brokers' URL names every sentinel of its StatefulSet.
  YAML::Node component = YAML::LoadFile(deploy + "/k8s/redis-sentinel/kustomization.yaml");
  EXPECT_EQ(component["kind"].as<std::string>(), "Component");
  std::string sentinel_url;
  for (const auto& p : component["patches"]) {
    std::smatch um;
    const std::string patch = p["patch"].as<std::string>();
    if (std::regex_search(patch, um, std::regex(R"re(--redis=([^"\s]+))re"))) sentinel_url = um[1];
  }
  auto endpoint = broker::RedisEndpoint::Parse(sentinel_url);
  ASSERT_TRUE(endpoint.ok()) << sentinel_url << ": " << endpoint.status().ToString();
  YAML::Node sentinels;
  for (const YAML::Node& doc :
       YAML::LoadAllFromFile(deploy + "/k8s/redis-sentinel/redis-sentinel.yaml")) {
    if (doc["kind"].as<std::string>() == "StatefulSet") sentinels = doc;
  }
  ASSERT_TRUE(sentinels);
  ASSERT_EQ(endpoint->sentinels.size(), sentinels["spec"]["replicas"].as<size_t>());
  for (size_t i = 0; i < endpoint->sentinels.size(); ++i) {
    EXPECT_EQ(endpoint->sentinels[i].host, "kiln-sentinel-" + std::to_string(i) + "." +
                                               sentinels["spec"]["serviceName"].as<std::string>() +
                                               ".kiln.svc.cluster.local");
  }
  EXPECT_EQ(endpoint->master_name, "kiln");  // sentinel.sh monitors "kiln"
  EXPECT_GE(endpoint->min_replicas, 1);

  // --- Keys in compose: keygen fills the volumes the configs read ---
  YAML::Node services = compose["services"];
  ASSERT_TRUE(services["keygen"]);
  for (const char* service : {"broker", "worker"}) {
    EXPECT_EQ(services[service]["depends_on"]["keygen"]["condition"].as<std::string>(),
              "service_completed_successfully")
        << service;
  }
  const auto keygen = NamedVolumes(services["keygen"]);
  const auto broker_volumes = NamedVolumes(services["broker"]);
  const auto worker_volumes = NamedVolumes(services["worker"]);
  auto volume_of = [](const std::map<std::string, std::string>& volumes, const std::string& path) {
    auto it = volumes.find(path);
    return it == volumes.end() ? std::string("(none)") : it->second;
  };
  const std::string broker_key_dir =
      fs::path(compose_broker_keys["secret_key_file"]).parent_path().string();
  const std::string worker_key_dir =
      fs::path(compose_worker_keys["secret_key_file"]).parent_path().string();
  EXPECT_EQ(volume_of(broker_volumes, broker_key_dir), volume_of(keygen, "/keys/broker"));
  EXPECT_EQ(volume_of(broker_volumes, compose_broker_keys["accepted_keys_dir"]),
            volume_of(keygen, "/keys/accepted"));
  EXPECT_EQ(volume_of(worker_volumes, worker_key_dir), volume_of(keygen, "/keys/worker"));
  EXPECT_EQ(fs::path(compose_worker_keys["broker_key_file"]).parent_path().string(),
            worker_key_dir);
  // keygen.sh names the worker's key after worker.id, which the broker checks.
  EXPECT_EQ(fs::path(compose_worker_keys["secret_key_file"]).stem().string(), compose_worker->id);
  EXPECT_NE(ReadFile(deploy + "/compose/keygen.sh")
                .find("worker=${KILN_WORKER_ID:-" + compose_worker->id + "}"),
            std::string::npos);

  // --- Keys in systemd: the secret keys are credentials ---
  const std::string broker_unit = ReadFile(deploy + "/systemd/kiln-broker.service");
  EXPECT_NE(broker_unit.find("\nLoadCredential=broker.key:"), std::string::npos);
  EXPECT_NE(unit.find("\nLoadCredential=worker.key:/etc/kiln/keys/%l.key\n"), std::string::npos);
  EXPECT_NE(unit.find(" --id %l\n"), std::string::npos);
}

// ---------------------------------------------------------------- live

class DashboardsLiveTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure() && cluster_) {
      std::cerr << cluster_->DumpLogs();
      std::string log = ReadFile(cluster_->dir() + "/prometheus.log");
      if (log.size() > 6000) log = "..." + log.substr(log.size() - 6000);
      std::cerr << "==== prometheus.log ====\n" << log << "\n";
    }
    prometheus_.Stop();
    cluster_.reset();
  }

  std::unique_ptr<TestCluster> cluster_;
  ChildProcess prometheus_;
};

struct LoadJob {
  std::string token, language, code;
  int timeout_ms;
  std::string status;
};

struct LoadOutcome {
  int jobs = 0;
  std::vector<std::string> problems;  // jobs that did not end as expected
};

// A few dozen jobs from four threads: every language, both tenants, a
// redacted secret, one failing and one timing-out job.
LoadOutcome RunLoad(int http_port) {
  std::vector<LoadJob> jobs;
  for (int i = 0; i < 8; ++i) {
    jobs.push_back(
        {TestCluster::kToken, "python", "print(" + std::to_string(i) + ")", 20000, "succeeded"});
    jobs.push_back({TestCluster::kToken, "javascript", "console.log(" + std::to_string(i) + ")",
                    20000, "succeeded"});
    jobs.push_back({TestCluster::kToken, "shell", "echo " + std::to_string(i), 20000, "succeeded"});
  }
  for (int i = 0; i < 3; ++i) {
    jobs.push_back({TestCluster::kOtherToken, i % 2 ? "shell" : "python",
                    i % 2 ? "echo b" : "print('b')", 20000, "succeeded"});
  }
  jobs.push_back(
      {TestCluster::kToken, "python", std::string("print('") + kSecret + "')", 20000, "succeeded"});
  jobs.push_back({TestCluster::kToken, "python", "raise ValueError('boom')", 20000, "failed"});
  jobs.push_back({TestCluster::kToken, "python", "import time\ntime.sleep(30)", 1000, "timed_out"});

  std::atomic<size_t> next{0};
  std::mutex mu;
  LoadOutcome out;
  out.jobs = static_cast<int>(jobs.size());
  auto submitter = [&] {
    httplib::Client cli("127.0.0.1", http_port);
    cli.set_read_timeout(60, 0);
    for (size_t i = next++; i < jobs.size(); i = next++) {
      const LoadJob& j = jobs[i];
      json body = {
          {"language", j.language}, {"code", j.code}, {"limits", {{"timeout_ms", j.timeout_ms}}}};
      auto r = cli.Post("/v1/executions", {{"Authorization", std::string("Bearer ") + j.token}},
                        body.dump(), "application/json");
      std::string status = r ? json::parse(r->body, nullptr, false).value("status", "") : "";
      if (!r || r->status != 200 || status != j.status) {
        std::lock_guard lock(mu);
        out.problems.push_back(j.language + " `" + j.code + "`: want " + j.status + ", got " +
                               (r ? std::to_string(r->status) + " " + r->body : "no answer"));
      }
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(4);
  for (int t = 0; t < 4; ++t) threads.emplace_back(submitter);
  for (auto& t : threads) t.join();
  return out;
}

TEST_F(DashboardsLiveTest, EveryPanelQueryReturnsSeriesAndAlertsFollowTheCluster) {
  ASSERT_TRUE(fs::exists(kPrometheus)) << kPrometheus << " missing: run deploy/install-deps.sh";
  cluster_ = TestCluster::Start({.brokers = 1,
                                 .workers = 2,
                                 .slots = 2,
                                 .extra_worker_yaml = "  metrics_listen: \"127.0.0.1:0\"\n",
                                 .tenant_a_secrets = {kSecret}});
  auto workers = cluster_->Request("GET", "/v1/workers", "", TestCluster::kAdminToken);
  ASSERT_EQ(workers.status, 200) << workers.raw;
  std::vector<std::string> worker_targets;
  for (const auto& w : workers.body["workers"])
    worker_targets.push_back(w.value("metrics_endpoint", ""));
  ASSERT_EQ(worker_targets.size(), 2u) << workers.raw;
  std::sort(worker_targets.begin(), worker_targets.end());

  // --- Prometheus, with the deploy scrape config and alert rules ---
  const int port = FreePort();
  const std::string config = cluster_->dir() + "/prometheus.yml";
  WriteFile(config,
            PrometheusConfig("127.0.0.1:" + std::to_string(cluster_->http_port()), worker_targets));
  prometheus_ = ChildProcess::Start(
      {kPrometheus, "--config.file=" + config, "--storage.tsdb.path=" + cluster_->dir() + "/tsdb",
       "--web.listen-address=127.0.0.1:" + std::to_string(port), "--log.level=info"},
      cluster_->dir() + "/prometheus.log");
  PrometheusApi prom(port);
  ASSERT_TRUE(WaitFor([&] { return prom.Ready(); }, 20s)) << "Prometheus did not start";
  ASSERT_TRUE(WaitFor([&] { return prom.Scalar("count(up == 1)") == 3; }, 15s))
      << prom.Query("up").dump();
  // Every alert of alerts.yml is loaded.
  const auto alerts = AlertRules();
  std::set<std::string> loaded;
  const json rules = prom.Get("/api/v1/rules");
  for (const auto& g : rules["data"]["groups"]) {
    for (const auto& r : g["rules"]) loaded.insert(r.value("name", ""));
  }
  for (const auto& [name, expr] : alerts) {
    EXPECT_TRUE(loaded.count(name)) << name << " not loaded: " << rules.dump();
  }
  for (const char* name : {"KilnNoLiveWorkers", "KilnWorkersLost", "KilnWorkerMetricsDown",
                           "KilnRedisErrors", "KilnQueueBacklogGrowing", "KilnHighErrorRate",
                           "KilnHighTimeoutRate", "KilnSlotSaturation"}) {
    EXPECT_TRUE(std::any_of(alerts.begin(), alerts.end(), [&](auto& a) { return a.first == name; }))
        << "alerts.yml lacks " << name;
  }

  // --- load, twice ---
  // Prometheus cannot see the increments a counter had before its first
  // scrape, so the first round creates every series (tenant, language,
  // status, reason, ...) and the second one moves them all: rates and ratios
  // then have something to show, whatever the scrape timing.
  auto holds = [&](const std::string& expr) { return !prom.Query(expr)["data"]["result"].empty(); };
  int jobs = 0;
  for (int round = 1; round <= 2; ++round) {
    SCOPED_TRACE("load round " + std::to_string(round));
    const LoadOutcome load = RunLoad(cluster_->http_port());
    for (const auto& p : load.problems) ADD_FAILURE() << p;
    ASSERT_TRUE(load.problems.empty());
    jobs += load.jobs;
    // Prometheus has scraped the final counts of broker and workers, and the
    // series the load created have at least three samples (rate() needs two).
    const std::vector<std::string> settled = {
        "sum(kiln_executions_finished_total) == " + std::to_string(jobs),
        "sum(kiln_worker_jobs_finished_total) == " + std::to_string(jobs),
        "max(kiln_worker_slots_busy) == 0",
        "min(count_over_time(kiln_executions_finished_total[1m])) >= 3",
        "min(count_over_time(kiln_worker_jobs_finished_total[1m])) >= 3",
        "min(count_over_time(kiln_queue_wait_seconds_count[1m])) >= 3",
        "min(count_over_time(kiln_worker_sandbox_start_seconds_count[1m])) >= 3",
    };
    bool ok = WaitFor([&] { return std::all_of(settled.begin(), settled.end(), holds); }, 20s);
    for (const auto& expr : settled) EXPECT_TRUE(holds(expr)) << expr;
    ASSERT_TRUE(ok);
  }

  // --- every query of every panel ---
  size_t evaluated = 0;
  for (const auto& file : DashboardFiles()) {
    json doc = LoadDashboard(file);
    ASSERT_FALSE(doc.is_discarded()) << file;
    std::map<std::string, std::string> values = kBuiltins;
    std::string unknown;
    for (const auto& var : doc["templating"]["list"]) {
      const std::string name = var.value("name", "");
      if (var.value("type", "") != "query") continue;
      // Grafana's label_values(selector, label): evaluated here the same way.
      auto query = Substitute(VariableQuery(var), values, &unknown);
      std::smatch m;
      ASSERT_TRUE(query &&
                  std::regex_match(*query, m, std::regex(R"(\s*label_values\((.*),\s*(\w+)\)\s*)")))
          << file << " variable " << name << ": unsupported query " << VariableQuery(var);
      std::set<std::string> options = prom.LabelValues(m[1].str(), m[2].str());
      ASSERT_FALSE(options.empty())
          << file << " variable " << name << ": " << *query << " has no values";
      if (name == "tenant") {
        EXPECT_EQ(options, (std::set<std::string>{"tenant-a", "tenant-b"})) << file;
      } else if (name == "instance") {
        EXPECT_EQ(options, std::set<std::string>(worker_targets.begin(), worker_targets.end()))
            << file;
      }
      values[name] = *options.begin();  // tenant-a, the tenant with secrets, failures and timeouts
    }
    std::vector<json> panels;
    CollectPanels(doc["panels"], &panels);
    for (const auto& p : panels) {
      if (!p.contains("targets")) continue;
      for (const auto& t : p["targets"]) {
        const std::string expr = t.value("expr", "");
        const std::string where = PanelName(file, p) + " query " + t.value("refId", "");
        auto final_expr = Substitute(expr, values, &unknown);
        if (!final_expr) {
          ADD_FAILURE() << where << ": unknown variable $" << unknown << " in " << expr;
          continue;
        }
        std::string problem = ResultProblem(prom.Query(*final_expr));
        EXPECT_EQ(problem, "") << where << "\n  " << *final_expr;
        ++evaluated;
      }
    }
  }
  EXPECT_GE(evaluated, 60u);

  // --- alerts: all evaluate, and all are quiet on a healthy cluster ---
  for (const auto& [name, expr] : alerts) {
    json r = prom.Query(expr);
    ASSERT_EQ(r.value("status", ""), "success") << name << ": " << r.dump();
    EXPECT_TRUE(r["data"]["result"].empty()) << name << " fires on a healthy cluster: " << r.dump();
  }
  // ... and Prometheus's own evaluation of them has not failed.
  const json evaluated_rules = prom.Get("/api/v1/rules");
  for (const auto& g : evaluated_rules["data"]["groups"]) {
    for (const auto& rule : g["rules"]) {
      EXPECT_EQ(rule.value("health", ""), "ok") << rule.value("name", "") << ": " << rule.dump();
    }
  }

  // --- both workers gone: one killed (missed heartbeats), one stopped ---
  cluster_->worker(0).Signal(SIGKILL);
  ASSERT_NE(cluster_->worker(0).Wait(5s), -1);
  cluster_->worker(1).Stop();
  std::map<std::string, std::string> exprs(alerts.begin(), alerts.end());
  auto fires = [&](const std::string& name) {
    json r = prom.Query(exprs[name]);
    return r.value("status", "") == "success" && !r["data"]["result"].empty();
  };
  const std::vector<std::string> must_fire = {"KilnNoLiveWorkers", "KilnWorkersLost",
                                              "KilnWorkerMetricsDown"};
  bool all = WaitFor([&] { return std::all_of(must_fire.begin(), must_fire.end(), fires); }, 20s);
  for (const auto& name : must_fire) {
    EXPECT_TRUE(fires(name)) << name << " does not fire without workers:\n  " << exprs[name];
  }
  EXPECT_TRUE(all);
  for (const char* name : {"KilnBrokerDown", "KilnRedisErrors", "KilnHighErrorRate"}) {
    EXPECT_FALSE(fires(name)) << name << " fires though only the workers are gone";
  }

  // A restarted worker removes what the killed one left (cgroups, mounts).
  cluster_->StartWorker(0);
  EXPECT_TRUE(cluster_->WaitForWorkers(1, 20s));
}

}  // namespace
}  // namespace kiln::testing
