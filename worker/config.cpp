#include "worker/config.hpp"

#include <unistd.h>

#include <algorithm>

#include "common/config/yaml_reader.hpp"
#include "common/curve/curve_keys.hpp"

namespace kiln::worker {
namespace {

// A uid range of its own per worker id, so workers on one host rarely meet
// (the host-wide uid locks make a meeting safe, only slower): one of up to
// 4096 ranges of uid_count uids from 200000, chosen by an FNV-1a hash of the
// id.
uint32_t DerivedUidBase(const std::string& id, uint32_t uid_count) {
  constexpr uint64_t kFirst = 200000, kLast = 0xFFFF0000u;
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char ch : id) hash = (hash ^ ch) * 1099511628211ull;
  const uint64_t ranges = std::min<uint64_t>(4096, (kLast - kFirst) / uid_count);
  return static_cast<uint32_t>(kFirst + (hash % ranges) * uid_count);
}

}  // namespace

common::StatusOr<WorkerConfig> LoadWorkerConfig(const std::string& file) {
  ASSIGN_OR_RETURN(YAML::Node root, common::LoadYamlFile(file));
  WorkerConfig c;
  common::Status st;
  common::YamlReader top(root, "");

  common::YamlReader w = top.Child("worker");
  w.Get("id", &c.id);
  w.Get("brokers", &c.brokers);
  w.Get("slots", &c.slots, 1, 1024);
  w.Get("warm_per_runtime", &c.warm_per_runtime, 0, 64);
  w.Get("heartbeat_interval_ms", &c.heartbeat_interval_ms, 50, 60'000);
  w.Get("heartbeat_liveness", &c.heartbeat_liveness, 1, 100);
  w.Get("runtimes", &c.runtimes);
  w.Get("max_memory_mb", &c.max_memory_mb, 16, 1u << 20);
  w.Get("max_timeout_ms", &c.max_timeout_ms, 100, 24ull * 3600 * 1000);
  w.Get("max_output_bytes", &c.max_output_bytes, 1024, common::protocol::kMaxStreamBytes);
  w.Get("max_collect_bytes", &c.max_collect_bytes, 0, common::protocol::kMaxFilesBytes);
  w.Get("drain_timeout_ms", &c.drain_timeout_ms, 0, 24u * 3600 * 1000);
  w.Get("session_interrupt_grace_ms", &c.session_interrupt_grace_ms, 100, 600'000);
  w.Get("busy_poll_us", &c.busy_poll_us, 0, 100'000);
  w.Get("session_stop_after_ms", &c.session_stop_after_ms, 0, 1000);
  w.Get("idle_session_memory_mb", &c.idle_session_memory_mb, 0, 1u << 24);
  w.Get("idle_session_memory_per_tenant_mb", &c.idle_session_memory_per_tenant_mb, 0, 1u << 24);
  w.Get("metrics_endpoint", &c.metrics_endpoint);
  w.Get("metrics_listen", &c.metrics_listen);
  w.Get("secret_key_file", &c.secret_key_file);
  w.Get("broker_key_file", &c.broker_key_file);
  common::YamlReader paths = w.Child("interpreters");
  paths.Get("python", &c.runtime_paths.python);
  paths.Get("javascript", &c.runtime_paths.node);
  paths.Get("shell", &c.runtime_paths.bash);
  if (st.ok()) st = paths.Finish();
  if (st.ok()) st = w.Finish();
  for (const auto& r : c.runtimes) {
    if (!runtimes::ParseLanguage(r).ok() && st.ok()) {
      st = common::InvalidRequest("worker.runtimes: unknown runtime '" + r +
                                  "' (python, javascript, shell)");
    }
  }

  auto& sb = c.sandbox;
  sb.node_modules = "/usr/local/lib/kiln/javascript/node_modules";
  common::YamlReader pk = top.Child("packages");
  pk.Get("javascript", &sb.node_modules);
  common::YamlReader preload = pk.Child("preload");
  preload.Get("python", &c.python_preload);
  for (const auto& m : c.python_preload) {
    if (!runtimes::IsValidModulePath(m) && st.ok()) {
      st = common::InvalidRequest("packages.preload.python: '" + m +
                                  "' is not a module name (e.g. numpy, matplotlib.pyplot)");
    }
  }
  if (st.ok()) st = preload.Finish();
  auto& pi = c.packages_install;
  common::YamlReader install = pk.Child("install");
  const bool own_cache_dir = install.Has("cache_dir");
  install.Get("cache_dir", &pi.cache_dir);
  install.Get("python_index", &pi.python_index);
  install.Get("npm_registry", &pi.npm_registry);
  install.Get("python", &pi.python);
  install.Get("npm", &pi.npm);
  install.Get("timeout_ms", &pi.timeout_ms, 1000, common::protocol::kMaxPackageInstallMs);
  uint64_t max_set_mb = pi.max_set_bytes >> 20;
  install.Get("max_set_mb", &max_set_mb, 1, 1u << 20);
  pi.max_set_bytes = max_set_mb << 20;
  install.Get("max_sets_per_tenant", &pi.max_sets_per_tenant, 1, 10'000);
  install.Get("uid", &pi.uid, 1, 0xFFFFFFFEu);
  install.Get("gid", &pi.gid, 1, 0xFFFFFFFEu);
  for (const std::string* url : {&pi.python_index, &pi.npm_registry}) {
    if (!url->empty() && url->rfind("http://", 0) != 0 && url->rfind("https://", 0) != 0 &&
        st.ok()) {
      st = common::InvalidRequest("packages.install: '" + *url + "' is not an http(s) URL");
    }
  }
  for (const std::string* path : {&pi.cache_dir, &pi.python, &pi.npm}) {
    if ((path->empty() || (*path)[0] != '/') && st.ok()) {
      st = common::InvalidRequest("packages.install: '" + *path + "' is not an absolute path");
    }
  }
  if (st.ok()) st = install.Finish();
  if (st.ok()) st = pk.Finish();

  common::YamlReader net = top.Child("network");
  common::YamlReader eg = net.Child("egress");
  auto& e = c.egress;
  eg.Get("enabled", &e.enabled);
  eg.Get("hosts", &e.hosts);
  eg.Get("allow_private", &e.allow_private);
  eg.Get("connect_timeout_ms", &e.connect_timeout_ms, 100, 600'000);
  eg.Get("request_timeout_ms", &e.request_timeout_ms, 100, 600'000);
  eg.Get("idle_timeout_ms", &e.idle_timeout_ms, 100, 86'400'000);
  eg.Get("max_open", &e.max_open, 1, 4096);
  if (st.ok()) st = eg.Finish();
  if (st.ok()) st = net.Finish();

  common::YamlReader s = top.Child("sandbox");
  // Two workers on one host must not share folders or cgroups: derive them
  // from the worker id unless set.
  const bool own_state_dir = s.Has("state_dir");
  const bool own_prefix = s.Has("cgroup_prefix");
  const bool own_uid_base = s.Has("uid_base");
  s.Get("state_dir", &sb.state_dir);
  s.GetEnum("cgroup_mode", &sb.cgroup_mode, {"auto", "v1", "v2"});
  s.Get("cgroup_prefix", &sb.cgroup_prefix);
  s.Get("uid_base", &sb.uid_base, 1000, 0xFFFF0000u);
  s.Get("uid_count", &sb.uid_count, 1, 1u << 20);
  s.Get("uid_lock_dir", &sb.uid_lock_dir);
  s.Get("init_path", &sb.init_path);
  s.Get("zygote", &sb.zygote);
  s.GetEnum("isolation", &sb.isolation, {"standard", "gvisor"});
  common::YamlReader gv = s.Child("gvisor");
  gv.Get("runsc", &sb.gvisor.runsc);
  gv.GetEnum("platform", &sb.gvisor.platform, {"ptrace", "kvm", "systrap"});
  uint64_t gv_memory_mb = sb.gvisor.memory_overhead_bytes >> 20;
  gv.Get("memory_overhead_mb", &gv_memory_mb, 0, 1u << 20);
  sb.gvisor.memory_overhead_bytes = gv_memory_mb << 20;
  gv.Get("pids_overhead", &sb.gvisor.pids_overhead, 0, 1u << 16);
  gv.Get("start_timeout_ms", &sb.gvisor.start_timeout_ms, 1000, 600'000);
  s.Get("ro_binds", &sb.ro_binds);
  uint64_t workspace_mb = sb.workspace_bytes >> 20, tmp_mb = sb.tmp_bytes >> 20;
  s.Get("workspace_mb", &workspace_mb, 1, 1u << 20);
  s.Get("tmp_mb", &tmp_mb, 1, 1u << 20);
  sb.workspace_bytes = workspace_mb << 20;
  sb.tmp_bytes = tmp_mb << 20;
  std::vector<std::string> relax;
  s.Get("relax", &relax);
  for (const auto& layer : relax) {
    bool known = false;
    for (const char* name : sandbox::kLayerNames) known = known || layer == name;
    if (!known && st.ok()) {
      st = common::InvalidRequest("sandbox.relax: unknown layer '" + layer + "'");
    }
    sb.relaxed_layers.insert(layer);
  }
  if (st.ok()) st = gv.Finish();
  if (st.ok()) st = s.Finish();

  common::YamlReader log = top.Child("log");
  log.GetEnum("level", &c.log.level,
              {"trace", "debug", "info", "warn", "error", "critical", "off"});
  log.GetEnum("format", &c.log.format, {"text", "json"});
  log.Get("levels", &c.log.levels);
  if (st.ok()) st = log.Finish();
  if (st.ok()) st = common::ValidateLogOptions(c.log);
  if (st.ok()) st = top.Finish();
  if (!st.ok()) return st.WithContext(file);

  if (c.runtimes.empty()) return common::InvalidRequest(file + ": worker.runtimes is empty");
  if (c.secret_key_file.empty() != c.broker_key_file.empty()) {
    return common::InvalidRequest(
        file + ": worker.secret_key_file and worker.broker_key_file go together");
  }
  if (!c.secret_key_file.empty()) {
    ASSIGN_OR_RETURN(common::CurveKeyPair own, common::ReadCurveSecretKeyFile(c.secret_key_file));
    ASSIGN_OR_RETURN(c.curve_broker_public, common::ReadCurvePublicKeyFile(c.broker_key_file));
    c.curve_public = std::move(own.public_z85);
    c.curve_secret = std::move(own.secret_z85);
    // The broker accepts a key only as the worker id its file names.
    if (c.id.empty()) {
      std::string stem = c.secret_key_file.substr(c.secret_key_file.rfind('/') + 1);
      if (stem.size() > 4 && stem.substr(stem.size() - 4) == ".key") stem.resize(stem.size() - 4);
      c.id = stem;
    }
  }
  if (c.id.empty()) {
    char host[256] = {};
    ::gethostname(host, sizeof(host) - 1);
    c.id = std::string(host) + "-" + std::to_string(::getpid());
  }
  if (!own_state_dir) sb.state_dir = "/run/kiln/" + c.id;
  if (!own_cache_dir) pi.cache_dir += "/" + c.id;
  if (!own_prefix) sb.cgroup_prefix = "kiln-" + c.id;
  if (!own_uid_base) sb.uid_base = DerivedUidBase(c.id, sb.uid_count);
  for (char ch : c.id) {
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.')) {
      return common::InvalidRequest(file + ": worker.id: only [A-Za-z0-9._-] allowed");
    }
  }
  return c;
}

}  // namespace kiln::worker
