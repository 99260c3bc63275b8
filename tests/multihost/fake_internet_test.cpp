// The multihost bed's fake "internet" (HostClusterOptions::web: host "web"
// runs fake_internet.py): reached from another host over HTTP and over
// HTTPS with the test CA, it answers and logs each request with the
// client's address. The network-on-request tests build on it, with the
// other options checked here: more runtimes, tenants and worker sections.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/multihost/host_cluster.hpp"

namespace kiln::testing {
namespace {

class FakeInternetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HostClusterOptions o;
    o.web = true;
    o.workers = 1;
    cluster_ = HostCluster::Start(o);
  }
  void TearDown() override {
    if (HasFailure() && cluster_) std::cerr << cluster_->DumpLogs();
    cluster_.reset();
  }

  // curl on host "x" with `args`; what it printed (stderr too) and its status.
  std::string Curl(const std::string& args, int* status = nullptr) const {
    return cluster_->bed().RunIn("x", [&] {
      std::string out;
      const int rc = RunCommand("curl -sS --max-time 10 " + args, &out);
      if (status != nullptr) *status = rc;
      return out;
    });
  }

  std::unique_ptr<HostCluster> cluster_;
};

TEST_F(FakeInternetTest, AnswersHttpAndHttpsFromAnotherHostAndLogsThem) {
  const std::string web = cluster_->web_ip();
  const std::string x = cluster_->bed().ip("x");
  ASSERT_NE(web, x);
  const std::string ca = "--cacert " + cluster_->web_dir() + "/ca.pem";
  auto resolve = [&](const std::string& name) { return "--resolve " + name + ":443:" + web + " "; };

  EXPECT_EQ(Curl("http://" + web + "/hello"), "hello " + web + " http\n");
  EXPECT_EQ(Curl(resolve("api.example.test") + ca + " https://api.example.test/hello"),
            "hello api.example.test https\n");

  // The certificate is really checked: the test CA is needed, and a name
  // the certificate does not cover is refused (curl: 60, peer not verified).
  int status = 0;
  Curl(resolve("api.example.test") + "https://api.example.test/hello", &status);
  EXPECT_EQ(status, 60) << "the test CA is trusted without --cacert";
  Curl(resolve("nope.example.test") + ca + " https://nope.example.test/hello", &status);
  EXPECT_EQ(status, 60) << "a name outside the certificate was accepted";

  EXPECT_EQ(Curl(resolve("big.example.test") + ca +
                 " -o /dev/null -w '%{http_code} %{size_download}' "
                 "'https://big.example.test/bytes?n=3000000'"),
            "200 3000000");
  EXPECT_EQ(Curl("--data-binary 'ping pong' http://" + web + "/echo"), "ping pong");
  EXPECT_EQ(Curl("-o /dev/null -w '%{http_code}' http://" + web + "/nowhere"), "404");

  // Each request, with x's address; the refused handshakes never got one.
  const std::string log = cluster_->WebLog();
  EXPECT_NE(log.find("http " + x + " GET /hello " + web + "\n"), std::string::npos) << log;
  EXPECT_NE(log.find("https " + x + " GET /hello api.example.test\n"), std::string::npos) << log;
  EXPECT_NE(log.find("https " + x + " GET /bytes?n=3000000 big.example.test\n"), std::string::npos)
      << log;
  EXPECT_NE(log.find("http " + x + " POST /echo " + web + "\n"), std::string::npos) << log;
  EXPECT_EQ(log.find("nope.example.test"), std::string::npos) << log;
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 5) << log;
}

// The other options the network tests need reach the configs: the
// runtimes, a tenant of their own and a top-level worker section.
TEST(FakeInternetOptionsTest, RuntimesTenantsAndWorkerYamlReachTheConfigs) {
  HostClusterOptions o;
  o.workers = 1;
  o.runtimes = {"python", "javascript", "shell"};
  o.tenants_yaml =
      "  - {name: tenant-n, tokens: [\"tenant-n-token\"], enabled: true, auto_approve: true}\n";
  o.worker_yaml = "log: {format: json}\n";
  auto cluster = HostCluster::Start(o);
  struct Job {
    std::string language, code, out;  // out: the stdout expected
  };
  const std::vector<Job> jobs = {{"python", "print('py', 6 * 7)", "py 42\n"},
                                 {"javascript", "console.log('js', 6 * 7)", "js 42\n"},
                                 {"shell", "echo sh $((6 * 7))", "sh 42\n"}};
  for (const Job& job : jobs) {
    HttpReply r = cluster->Request(
        "POST", "/v1/executions",
        nlohmann::json({{"language", job.language}, {"code", job.code}, {"wait", true}}).dump(),
        "tenant-n-token");
    EXPECT_EQ(r.status, 200) << r.raw;
    EXPECT_EQ(r.body.value("status", ""), "succeeded") << r.raw;
    EXPECT_EQ(r.body.value("stdout", ""), job.out) << r.raw;
  }
  const std::string log = ReadFile(cluster->dir() + "/w1.log");
  EXPECT_EQ(log.rfind("{", 0), 0u) << "the worker's log is not JSON:\n" << log;
  if (HasFailure()) std::cerr << cluster->DumpLogs();
}

TEST(FakeInternetOptionsTest, WebAndRedisHaTogetherAreRefused) {
  HostClusterOptions o;
  o.web = true;
  o.redis_ha = true;
  EXPECT_THROW(HostCluster::Start(o), std::invalid_argument);
}

}  // namespace
}  // namespace kiln::testing
