#include "worker/config.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <set>

namespace kiln::worker {
namespace {

using ::testing::HasSubstr;

std::string Write(const std::string& text) {
  static int n = 0;
  std::string path = ::testing::TempDir() + "/worker_cfg_" + std::to_string(n++) + ".yaml";
  std::ofstream(path) << text;
  return path;
}

TEST(WorkerConfig, ExampleFileLoads) {
  auto c = LoadWorkerConfig(std::string(KILN_SOURCE_DIR) + "/deploy/config/worker.example.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->slots, 4u);
  EXPECT_EQ(c->brokers, std::vector<std::string>{"tcp://127.0.0.1:5555"});
}

TEST(WorkerConfig, PerWorkerDefaultsDeriveFromTheId) {
  auto c = LoadWorkerConfig(Write("worker: {id: w7}\n"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->sandbox.state_dir, "/run/kiln/w7");
  EXPECT_EQ(c->sandbox.cgroup_prefix, "kiln-w7");
  // A uid range per id: of a few ids, no two share a base, each range is
  // whole and above the host's own users; an explicit base is kept.
  std::set<uint32_t> bases;
  for (const char* id : {"w1", "w2", "w3", "host-a-w1", "host-b-w1"}) {
    auto w = LoadWorkerConfig(
        Write(std::string("worker: {id: ") + id + "}\nsandbox: {uid_count: 5000}\n"));
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    EXPECT_GE(w->sandbox.uid_base, 200000u);
    EXPECT_EQ((w->sandbox.uid_base - 200000u) % 5000u, 0u);
    EXPECT_LE(uint64_t{w->sandbox.uid_base} + 5000u, 0xFFFF0000ull);
    bases.insert(w->sandbox.uid_base);
  }
  EXPECT_EQ(bases.size(), 5u);
  auto own = LoadWorkerConfig(Write("worker: {id: w7}\nsandbox: {uid_base: 300000}\n"));
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  EXPECT_EQ(own->sandbox.uid_base, 300000u);
  EXPECT_EQ(own->sandbox.uid_lock_dir, "/run/kiln-uids");
}

TEST(WorkerConfig, RefusesUnknownKeysRuntimesAndLayers) {
  auto a = LoadWorkerConfig(Write("worker: {slot: 3}\n"));
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("worker.slot: unknown key"));
  auto b = LoadWorkerConfig(Write("worker: {runtimes: [python, cobol]}\n"));
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(b.status().message(), HasSubstr("cobol"));
  auto c = LoadWorkerConfig(Write("sandbox: {relax: [seccomp, magic]}\n"));
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("magic"));
  auto d = LoadWorkerConfig(Write("sandbox: {cgroup_mode: v3}\n"));
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(d.status().message(), HasSubstr("sandbox.cgroup_mode"));
  auto e = LoadWorkerConfig(Write("worker: {id: \"a b\"}\n"));
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(), HasSubstr("worker.id"));
}

// How long a session runs on after an execution before it is stopped.
TEST(WorkerConfig, SessionStopDelay) {
  auto d = LoadWorkerConfig(Write("worker: {id: w1}\n"));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->session_stop_after_ms, 10u);
  auto z = LoadWorkerConfig(Write("worker: {id: w1, session_stop_after_ms: 0}\n"));
  ASSERT_TRUE(z.ok()) << z.status().ToString();
  EXPECT_EQ(z->session_stop_after_ms, 0u);
  auto big = LoadWorkerConfig(Write("worker: {id: w1, session_stop_after_ms: 1001}\n"));
  ASSERT_FALSE(big.ok());
  EXPECT_THAT(big.status().message(), HasSubstr("worker.session_stop_after_ms"));
}

TEST(WorkerConfig, PackagesOnRequest) {
  auto d = LoadWorkerConfig(Write("worker: {id: w7}\n"));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->packages_install.cache_dir, "/var/cache/kiln/packages/w7");
  EXPECT_EQ(d->packages_install.python_index, "") << "no index unless the operator names one";
  EXPECT_EQ(d->packages_install.timeout_ms, 60000u);
  auto c = LoadWorkerConfig(
      Write("worker: {id: w7}\npackages:\n  install: {python_index: 'https://pypi.internal/simple',"
            " npm_registry: 'http://127.0.0.1:4873/', cache_dir: /srv/pk, timeout_ms: 5000,"
            " max_set_mb: 64, max_sets_per_tenant: 3, uid: 65000, gid: 65001}\n"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const PackageInstallConfig& p = c->packages_install;
  EXPECT_EQ(p.python_index, "https://pypi.internal/simple");
  EXPECT_EQ(p.npm_registry, "http://127.0.0.1:4873/");
  EXPECT_EQ(p.cache_dir, "/srv/pk");
  EXPECT_EQ(p.timeout_ms, 5000u);
  EXPECT_EQ(p.max_set_bytes, 64ull << 20);
  EXPECT_EQ(p.max_sets_per_tenant, 3u);
  EXPECT_EQ(p.uid, 65000u);
  EXPECT_EQ(p.gid, 65001u);
  for (const char* bad :
       {"{python_index: 'file:///etc'}", "{npm_registry: 'registry'}", "{cache_dir: relative}",
        "{timeout_ms: 300001}", "{uid: 0}", "{index: x}"}) {
    auto b = LoadWorkerConfig(Write(std::string("packages:\n  install: ") + bad + "\n"));
    EXPECT_FALSE(b.ok()) << bad;
    if (!b.ok()) {
      EXPECT_THAT(b.status().message(), HasSubstr("packages.install")) << bad;
    }
  }
}

TEST(WorkerConfig, IsolationLevelAndGvisorSettings) {
  auto std_cfg = LoadWorkerConfig(Write("worker: {id: a}\n"));
  ASSERT_TRUE(std_cfg.ok()) << std_cfg.status().ToString();
  EXPECT_EQ(std_cfg->sandbox.isolation, "standard");
  auto gv = LoadWorkerConfig(
      Write("sandbox:\n  isolation: gvisor\n  gvisor: {runsc: /opt/runsc, platform: kvm,\n"
            "    memory_overhead_mb: 100, pids_overhead: 50, start_timeout_ms: 5000}\n"));
  ASSERT_TRUE(gv.ok()) << gv.status().ToString();
  EXPECT_EQ(gv->sandbox.isolation, "gvisor");
  EXPECT_EQ(gv->sandbox.gvisor.runsc, "/opt/runsc");
  EXPECT_EQ(gv->sandbox.gvisor.platform, "kvm");
  EXPECT_EQ(gv->sandbox.gvisor.memory_overhead_bytes, 100ull << 20);
  EXPECT_EQ(gv->sandbox.gvisor.pids_overhead, 50u);
  EXPECT_EQ(gv->sandbox.gvisor.start_timeout_ms, 5000u);
  auto bad = LoadWorkerConfig(Write("sandbox: {isolation: kata}\n"));
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("sandbox.isolation"));
  auto bad_platform = LoadWorkerConfig(Write("sandbox: {gvisor: {platform: xen}}\n"));
  ASSERT_FALSE(bad_platform.ok());
  EXPECT_THAT(bad_platform.status().message(), HasSubstr("platform"));
  auto unknown = LoadWorkerConfig(Write("sandbox: {gvisor: {flags: [--x]}}\n"));
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(), HasSubstr("flags"));
}

}  // namespace
}  // namespace kiln::worker
