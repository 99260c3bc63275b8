// The `kiln` CLI as users run it: the real binary (bin/kiln) against a real
// cluster (redis-server, kiln-broker, kiln-worker). Covers every subcommand,
// the exit statuses, and the order and timing of `kiln run --stream` output.
//
// ApprovalCliTest runs a second cluster with a tenant whose jobs need an
// admin's approval and one with code execution off.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "tests/support/cluster.hpp"

extern char** environ;

namespace kiln::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

const std::string kKiln = std::string(KILN_BINARY_DIR) + "/bin/kiln";

// What one run of `kiln` did. `chunks` keeps every read from stdout/stderr
// with the time it arrived, to check that --stream prints live.
struct KilnRun {
  int exit_code = -1;
  std::string out, err;
  struct Chunk {
    bool is_stdout;
    std::string data;
    Clock::time_point at;
  };
  std::vector<Chunk> chunks;
  Clock::time_point started, ended;
  std::string Describe() const {
    return "exit " + std::to_string(exit_code) + "\n--- stdout\n" + out + "\n--- stderr\n" + err;
  }
};

// Runs bin/kiln with `args`, writing `input` to its stdin, with `env` added
// to (and overriding) a clean environment. Kills it after `timeout`.
KilnRun RunKiln(const std::vector<std::string>& args, const std::vector<std::string>& env,
                const std::string& input = "",
                std::chrono::seconds timeout = std::chrono::seconds(120)) {
  int in_pipe[2], out_pipe[2], err_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0 ||
      pipe2(err_pipe, O_CLOEXEC) != 0) {
    throw std::runtime_error("pipe failed");
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in_pipe[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  std::vector<std::string> argv_store = {kKiln};
  argv_store.insert(argv_store.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_store) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_store = {"PATH=/usr/bin:/bin"};
  env_store.insert(env_store.end(), env.begin(), env.end());
  std::vector<char*> envp;
  for (auto& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);

  KilnRun run;
  run.started = Clock::now();
  pid_t pid = -1;
  int rc = posix_spawn(&pid, kKiln.c_str(), &fa, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(in_pipe[0]);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (rc != 0) throw std::runtime_error("cannot start kiln: " + std::string(strerror(rc)));
  // Small inputs fit in the pipe buffer; the tests send no more than that.
  if (!input.empty() && write(in_pipe[1], input.data(), input.size()) < 0) {
    throw std::runtime_error("writing kiln's stdin failed");
  }
  close(in_pipe[1]);

  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  const auto deadline = Clock::now() + timeout;
  while (open_fds > 0 && Clock::now() < deadline) {
    if (poll(fds, 2, 100) < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP))) continue;
      char buf[4096];
      ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
        continue;
      }
      run.chunks.push_back({i == 0, std::string(buf, static_cast<size_t>(n)), Clock::now()});
      (i == 0 ? run.out : run.err).append(buf, static_cast<size_t>(n));
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  if (open_fds > 0) kill(pid, SIGKILL);  // timed out
  int status = 0;
  waitpid(pid, &status, 0);
  run.ended = Clock::now();
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return run;
}

// `text` as JSON; an empty object when it is not JSON (so a failed run fails
// the assertions on its fields instead of throwing).
json Parse(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  return j.is_discarded() ? json::object() : j;
}

class CliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = TestCluster::Start({.brokers = 1, .workers = 1, .slots = 3});
    home_ = cluster_->dir() + "/home";
    std::filesystem::create_directories(home_);
  }
  static void TearDownTestSuite() { cluster_.reset(); }
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_->DumpLogs();
  }

  // The environment of a tenant-a user: URL and token from the environment,
  // and a HOME without a config file.
  static std::vector<std::string> Env(const std::string& token = TestCluster::kToken) {
    return {"KILN_URL=" + cluster_->url(), "KILN_TOKEN=" + token, "HOME=" + home_};
  }
  static std::vector<std::string> AdminEnv() {
    return {"KILN_URL=" + cluster_->url(),
            "KILN_ADMIN_TOKEN=" + std::string(TestCluster::kAdminToken), "HOME=" + home_};
  }
  static KilnRun Kiln(const std::vector<std::string>& args, const std::string& input = "") {
    return RunKiln(args, Env(), input);
  }
  static std::string WriteTemp(const std::string& name, const std::string& content) {
    std::string path = cluster_->dir() + "/" + name;
    WriteFile(path, content);
    return path;
  }

  static std::unique_ptr<TestCluster> cluster_;
  static std::string home_;
};
std::unique_ptr<TestCluster> CliTest::cluster_;
std::string CliTest::home_;

// --- kiln run: where the code and the language come from ---------------------

TEST_F(CliTest, RunsCodeFromTheFlag) {
  auto r = Kiln({"run", "-l", "python", "-c", "print(6 * 7)"});
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_EQ(r.out, "42\n");
}

TEST_F(CliTest, RunsAFileWithTheLanguageFromItsExtension) {
  auto py =
      WriteTemp("job.py", "import sys\nprint('from', 'file')\nprint('err', file=sys.stderr)\n");
  auto r = Kiln({"run", py});
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_EQ(r.out, "from file\n");
  EXPECT_EQ(r.err, "err\n");
  auto sh = WriteTemp("job.sh", "echo shell-$((2 + 3))\n");
  r = Kiln({"run", sh});
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_EQ(r.out, "shell-5\n");
  auto txt = WriteTemp("job.txt", "print(1)\n");
  r = Kiln({"run", txt});
  EXPECT_EQ(r.exit_code, 64) << r.Describe();
  EXPECT_THAT(r.err, HasSubstr("--lang"));
}

TEST_F(CliTest, RunsCodeFromStdin) {
  auto r = Kiln({"run", "-l", "javascript", "-"}, "console.log(6 * 7 + 1)\n");
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_EQ(r.out, "43\n");
  r = Kiln({"run", "--lang", "sh"}, "echo piped\n");  // no FILE: stdin too
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_EQ(r.out, "piped\n");
}

TEST_F(CliTest, InputsEnvAndFilesReachTheJob) {
  auto r = Kiln({"run", "-l", "python", "-c", "print(n + sum(xs), name)\nresult = {'twice': n * 2}",
                 "--input", "n=10", "--input", "xs=[1,2]", "--input", "name=ada"});
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_EQ(r.out, "13 ada\n");
  EXPECT_THAT(r.err, HasSubstr("result: {\"twice\":20}"));

  r = Kiln({"run", "-l", "shell", "-c", "echo \"$GREETING $n\"", "--env", "GREETING=hello",
            "--input", "n=5"});
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_EQ(r.out, "hello 5\n");

  auto local = WriteTemp("data.csv", "a,b\n1,2\n");
  r = Kiln({"run", "-l", "python", "-c", "print(open('in/d.csv').read(), end='')", "--file",
            local + ":in/d.csv"});
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_EQ(r.out, "a,b\n1,2\n");
  r = Kiln({"run", "-l", "shell", "-c", "cat data.csv", "--file", local});  // DEST: its name
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_EQ(r.out, "a,b\n1,2\n");
}

TEST_F(CliTest, JsonPrintsTheRecord) {
  auto r = Kiln({"run", "-l", "python", "-c", "print('hi')\nresult = [1, 2]", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  json record = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(record.is_object()) << r.out;
  EXPECT_EQ(record["status"], "succeeded");
  EXPECT_EQ(record["stdout"], "hi\n");
  EXPECT_EQ(record["result"], json::array({1, 2}));
  EXPECT_EQ(r.err, "");
}

TEST_F(CliTest, NoWaitPrintsTheIdAndStatusFollowsIt) {
  auto r = Kiln(
      {"run", "-l", "python", "-c", "import time; time.sleep(0.3); print('later')", "--no-wait"});
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  std::string id = r.out.substr(0, r.out.find('\n'));
  ASSERT_THAT(id, ::testing::StartsWith("ex_"));
  json record;
  bool ended = WaitFor(
      [&] {
        auto s = Kiln({"status", id, "--json"});
        record = json::parse(s.out, nullptr, false);
        return s.exit_code == 0 && record.is_object() && record["status"] == "succeeded";
      },
      std::chrono::seconds(30));
  ASSERT_TRUE(ended) << record.dump();
  EXPECT_EQ(record["stdout"], "later\n");
  auto s = Kiln({"status", id});
  EXPECT_EQ(s.exit_code, 0);
  EXPECT_THAT(s.out, HasSubstr("succeeded"));
  EXPECT_THAT(s.out, HasSubstr(id));
  s = Kiln({"status", "ex_doesnotexist000000"});
  EXPECT_EQ(s.exit_code, 64) << s.Describe();
  EXPECT_THAT(s.err, HasSubstr("NOT_FOUND"));
}

// --- kiln run --stream ----------------------------------------------------------

TEST_F(CliTest, StreamPrintsLinesLiveAndInOrder) {
  const char* code =
      "import sys, time\n"
      "for i in range(5):\n"
      "    print('line', i, flush=True)\n"
      "    if i == 2: print('warn', i, file=sys.stderr, flush=True)\n"
      "    time.sleep(0.4)\n"
      "sys.exit(4)\n";
  auto r = Kiln({"run", "-l", "python", "-c", code, "--stream"});
  EXPECT_EQ(r.exit_code, 4) << r.Describe();  // the job's own exit code
  EXPECT_EQ(r.out, "line 0\nline 1\nline 2\nline 3\nline 4\n");
  EXPECT_EQ(r.err, "warn 2\n");
  // Live: the first line arrived well before kiln ended (the job sleeps 2 s
  // after it), and the lines arrived spread out rather than all at the end.
  Clock::time_point first_out{}, last_out{};
  for (const auto& c : r.chunks) {
    if (!c.is_stdout) continue;
    if (first_out == Clock::time_point{}) first_out = c.at;
    last_out = c.at;
  }
  ASSERT_NE(first_out, Clock::time_point{});
  EXPECT_GT(r.ended - first_out, std::chrono::milliseconds(1200));
  EXPECT_GT(last_out - first_out, std::chrono::milliseconds(1000));
  // Without --stream the same output arrives only at the end, all at once.
  auto waited = Kiln({"run", "-l", "python", "-c", code});
  EXPECT_EQ(waited.exit_code, 4);
  EXPECT_EQ(waited.out, r.out);
  ASSERT_FALSE(waited.chunks.empty());
  EXPECT_LT(waited.ended - waited.chunks.front().at, std::chrono::milliseconds(1000));
}

TEST_F(CliTest, StreamWithJsonPrintsOneEventPerLine) {
  auto r = Kiln({"run", "-l", "shell", "-c", "echo a; echo b >&2; exit 2", "--stream", "--json"});
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  std::vector<json> events;
  size_t start = 0;
  while (start < r.out.size()) {
    size_t end = r.out.find('\n', start);
    events.push_back(json::parse(r.out.substr(start, end - start), nullptr, false));
    ASSERT_TRUE(events.back().is_object()) << r.out;
    start = end + 1;
  }
  ASSERT_GE(events.size(), 3u) << r.out;
  EXPECT_EQ(events.front()["event"], "execution_start");
  EXPECT_EQ(events.back()["event"], "execution_end");
  EXPECT_EQ(events.back()["data"]["exit_code"], 2);
  std::string out, err;
  for (const auto& e : events) {
    if (e["event"] != "output_chunk") continue;
    (e["data"]["stream"] == "stdout" ? out : err) += e["data"]["data"].get<std::string>();
  }
  EXPECT_EQ(out, "a\n");
  EXPECT_EQ(err, "b\n");
}

TEST_F(CliTest, StreamAndNoWaitExcludeEachOther) {
  auto r = Kiln({"run", "-l", "shell", "-c", "true", "--stream", "--no-wait"});
  EXPECT_EQ(r.exit_code, 64) << r.Describe();
}

// --- exit statuses ----------------------------------------------------------------

TEST_F(CliTest, ExitStatusFollowsTheJob) {
  auto r = Kiln({"run", "-l", "shell", "-c", "exit 3"});
  EXPECT_EQ(r.exit_code, 3) << r.Describe();
  r = Kiln({"run", "-l", "python", "-c", "raise ValueError('boom')"});
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_THAT(r.err, HasSubstr("ValueError"));
  r = Kiln({"run", "-l", "python", "-c", "import time; time.sleep(5)", "--timeout", "500"});
  EXPECT_EQ(r.exit_code, 124) << r.Describe();
  EXPECT_THAT(r.err, HasSubstr("timed_out"));
  // A `result` JSON cannot hold: the program exited 0, the job failed (docs/cli.md).
  r = Kiln({"run", "-l", "python", "-c", "result = object()"});
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_THAT(r.err, HasSubstr("is not JSON serializable"));
}

TEST_F(CliTest, RequestErrorsExitWithTheirCodes) {
  // Refused by the broker: above the configured maximum timeout.
  auto r = Kiln({"run", "-l", "python", "-c", "print(1)", "--timeout", "99999999"});
  EXPECT_EQ(r.exit_code, 64) << r.Describe();
  EXPECT_THAT(r.err, HasSubstr("kiln: LIMIT_EXCEEDED: "));
  // Refused by the broker: an input name that is not an identifier.
  r = Kiln({"run", "-l", "python", "-c", "print(1)", "--input-json", "{\"1bad\": 1}"});
  EXPECT_EQ(r.exit_code, 64) << r.Describe();
  EXPECT_THAT(r.err, HasSubstr("kiln: INVALID_REQUEST: "));
  // A wrong token.
  r = RunKiln({"run", "-l", "python", "-c", "print(1)"}, Env("not-a-token"));
  EXPECT_EQ(r.exit_code, 64) << r.Describe();
  EXPECT_THAT(r.err, HasSubstr("UNAUTHORIZED"));
  // No broker at all: infrastructure.
  r = RunKiln({"run", "-l", "python", "-c", "print(1)"},
              {"KILN_URL=http://127.0.0.1:" + std::to_string(FreePort()),
               "KILN_TOKEN=" + std::string(TestCluster::kToken), "HOME=" + home_});
  EXPECT_EQ(r.exit_code, 69) << r.Describe();
  EXPECT_THAT(r.err, HasSubstr("UNAVAILABLE"));
  // A local usage error.
  r = Kiln({"run", "-l", "cobol", "-c", "x"});
  EXPECT_EQ(r.exit_code, 64) << r.Describe();
}

// --- cancel -------------------------------------------------------------------------

TEST_F(CliTest, CancelEndsARunningJob) {
  auto r = Kiln({"run", "-l", "python", "-c",
                 "import time\nprint('started', flush=True)\ntime.sleep(30)", "--no-wait"});
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  std::string id = r.out.substr(0, r.out.find('\n'));
  bool running = WaitFor(
      [&] {
        auto s = Kiln({"status", id, "--json"});
        return Parse(s.out).value("status", "") == "running";
      },
      std::chrono::seconds(20));
  ASSERT_TRUE(running);
  auto c = Kiln({"cancel", id});
  EXPECT_EQ(c.exit_code, 0) << c.Describe();
  EXPECT_THAT(c.out, HasSubstr("cancelled"));
  auto s = Kiln({"status", id, "--json"});
  json record = Parse(s.out);
  EXPECT_EQ(record["status"], "cancelled") << s.out;
  // Cancelling again changes nothing; an unknown id is a request error.
  c = Kiln({"cancel", id, "--json"});
  EXPECT_EQ(c.exit_code, 0) << c.Describe();
  EXPECT_EQ(Parse(c.out)["status"], "cancelled");
  c = Kiln({"cancel", "ex_doesnotexist000000"});
  EXPECT_EQ(c.exit_code, 64) << c.Describe();
}

// --- admin commands: workers, health ---------------------------------------------

TEST_F(CliTest, WorkersNeedsAnAdminToken) {
  auto r = RunKiln({"workers"}, AdminEnv());
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_THAT(r.out, HasSubstr("RUNTIMES"));
  EXPECT_THAT(r.out, HasSubstr("w0-"));
  EXPECT_THAT(r.out, HasSubstr("python"));
  r = RunKiln({"workers", "--json"}, AdminEnv());
  EXPECT_EQ(Parse(r.out)["workers"].size(), 1u) << r.out;
  r = Kiln({"workers"});  // a tenant token
  EXPECT_EQ(r.exit_code, 64) << r.Describe();
  EXPECT_THAT(r.err, HasSubstr("FORBIDDEN"));
}

TEST_F(CliTest, HealthSaysOkOrUnavailable) {
  auto r = RunKiln({"health"}, {"KILN_URL=" + cluster_->url(), "HOME=" + home_});
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_THAT(r.out, HasSubstr("ok: redis ok, 1 workers"));
  r = RunKiln({"health"},
              {"KILN_URL=http://127.0.0.1:" + std::to_string(FreePort()), "HOME=" + home_});
  EXPECT_EQ(r.exit_code, 69) << r.Describe();
}

TEST_F(CliTest, UrlAndTokenFromTheConfigFile) {
  std::string cfg = WriteTemp("kiln-config.yaml",
                              "url: " + cluster_->url() + "\ntoken: " + TestCluster::kToken + "\n");
  auto r = RunKiln({"run", "-l", "shell", "-c", "echo via-config"},
                   {"KILN_CONFIG=" + cfg, "HOME=" + home_});
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_EQ(r.out, "via-config\n");
  // Flags win over the environment.
  r = RunKiln({"--url", cluster_->url(), "--token", TestCluster::kToken, "run", "-l", "shell", "-c",
               "echo via-flags"},
              {"KILN_URL=http://127.0.0.1:1", "KILN_TOKEN=wrong", "HOME=" + home_});
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_EQ(r.out, "via-flags\n");
}

TEST_F(CliTest, EveryCommandHasHelp) {
  for (std::string cmd : {"run", "status", "cancel", "sessions", "kill", "approvals", "approve",
                          "deny", "workers", "health", "mcp"}) {
    auto r = Kiln({cmd, "--help"});
    EXPECT_EQ(r.exit_code, 0) << cmd << ": " << r.Describe();
    EXPECT_THAT(r.out, HasSubstr("Usage: kiln " + cmd)) << cmd;
  }
}

// --- sessions (GET/DELETE /v1/sessions and the session REPL) ----------------------

TEST_F(CliTest, SessionsKeepStateAndCanBeListedAndKilled) {
  auto r = Kiln({"run", "-l", "python", "-c", "x = 41", "--session", "cli-s1", "--conversation",
                 "cli-conv-1"});
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  r = Kiln({"run", "-l", "python", "-c", "print(x + 1)", "--session", "cli-s1", "--conversation",
            "cli-conv-1"});
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_EQ(r.out, "42\n");

  auto list = Kiln({"sessions", "--conversation", "cli-conv-1", "--json"});
  ASSERT_EQ(list.exit_code, 0) << list.Describe();
  json body = json::parse(list.out, nullptr, false);
  ASSERT_TRUE(body.is_object()) << list.out;
  std::vector<std::string> ids;
  for (const auto& s : body["sessions"]) ids.push_back(s.value("id", ""));
  EXPECT_THAT(ids, ::testing::Contains("cli-s1"));
  auto table = Kiln({"sessions"});
  EXPECT_EQ(table.exit_code, 0) << table.Describe();
  EXPECT_THAT(table.out, HasSubstr("cli-s1"));
  EXPECT_THAT(table.out, HasSubstr("cli-conv-1"));
  // Another conversation's filter does not list it.
  list = Kiln({"sessions", "--conversation", "cli-conv-other", "--json"});
  EXPECT_THAT(list.out, ::testing::Not(HasSubstr("cli-s1")));

  auto k = Kiln({"kill", "cli-s1"});
  EXPECT_EQ(k.exit_code, 0) << k.Describe();
  EXPECT_THAT(k.out, HasSubstr("cli-s1 deleted"));
  table = Kiln({"sessions"});
  EXPECT_THAT(table.out, ::testing::Not(HasSubstr("cli-s1")));
  k = Kiln({"kill", "cli-s1"});
  EXPECT_EQ(k.exit_code, 64) << k.Describe();
  EXPECT_THAT(k.err, HasSubstr("SESSION_NOT_FOUND"));
}

// --- approvals (GET /v1/approvals, POST .../approve|deny) ---------------------------

TEST_F(CliTest, ApprovalCommandsNeedAnAdminAndAKnownId) {
  auto r = RunKiln({"approvals", "--json"}, AdminEnv());
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_TRUE(Parse(r.out)["approvals"].is_array()) << r.out;
  r = RunKiln({"approvals"}, AdminEnv());
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  r = Kiln({"approvals"});  // a tenant token
  EXPECT_EQ(r.exit_code, 64) << r.Describe();
  EXPECT_THAT(r.err, HasSubstr("FORBIDDEN"));
  r = RunKiln({"approve", "ex_doesnotexist000000"}, AdminEnv());
  EXPECT_EQ(r.exit_code, 64) << r.Describe();
  EXPECT_THAT(r.err, HasSubstr("NOT_FOUND"));
  r = RunKiln({"deny", "ex_doesnotexist000000"}, AdminEnv());
  EXPECT_EQ(r.exit_code, 64) << r.Describe();
  EXPECT_THAT(r.err, HasSubstr("NOT_FOUND"));
  // A tenant cannot approve, not even its own finished job.
  auto job = Kiln({"run", "-l", "shell", "-c", "true", "--json"});
  std::string id = Parse(job.out).value("id", "");
  ASSERT_FALSE(id.empty()) << job.Describe();
  r = Kiln({"approve", id});
  EXPECT_EQ(r.exit_code, 64) << r.Describe();
  EXPECT_THAT(r.err, HasSubstr("FORBIDDEN"));
}

// --- the approval flow and disabled tenants (issue 6's per-tenant settings) ---------

// The tenant settings (broker config, docs/configuration.md) that make a
// tenant's jobs wait for an admin's approval.
constexpr char kApprovalTenantFields[] = ", enabled: true, auto_approve: false";
constexpr char kApprovalToken[] = "tenant-approve-token";
constexpr char kDisabledToken[] = "tenant-off-token";

class ApprovalCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterOptions options{.brokers = 1, .workers = 1, .slots = 3};
    options.extra_tenants_yaml = std::string("  - {name: tenant-approve, tokens: [\"") +
                                 kApprovalToken + "\"]" + kApprovalTenantFields + "}\n" +
                                 // No settings at all: code execution is off by default.
                                 "  - {name: tenant-off, tokens: [\"" + kDisabledToken + "\"]}\n";
    cluster_ = TestCluster::Start(options);
    home_ = cluster_->dir() + "/home";
    std::filesystem::create_directories(home_);
  }
  static void TearDownTestSuite() { cluster_.reset(); }
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_->DumpLogs();
  }
  static std::vector<std::string> Env(const std::string& token) {
    return {"KILN_URL=" + cluster_->url(), "KILN_TOKEN=" + token,
            "KILN_ADMIN_TOKEN=" + std::string(TestCluster::kAdminToken), "HOME=" + home_};
  }
  // The pending approval whose code is `code`, once `kiln approvals` lists it
  // (else null, and the last listing is printed).
  static json WaitForApproval(const std::string& code) {
    json found;
    KilnRun last;
    WaitFor(
        [&] {
          last = RunKiln({"approvals", "--json"}, Env(kApprovalToken));
          const json listing = Parse(last.out);
          for (const auto& a : listing.value("approvals", json::array())) {
            if (a.value("code", "") == code) found = a;
          }
          return found.is_object();
        },
        std::chrono::seconds(20));
    if (!found.is_object()) std::cerr << "no approval for " << code << ": " << last.Describe();
    return found;
  }

  static std::unique_ptr<TestCluster> cluster_;
  static std::string home_;
};
std::unique_ptr<TestCluster> ApprovalCliTest::cluster_;
std::string ApprovalCliTest::home_;

TEST_F(ApprovalCliTest, PendingJobIsListedWithItsCodeAndRunsOnceApproved) {
  const std::string code = "print('approved', 6 * 7)";
  auto r = RunKiln({"run", "-l", "python", "-c", code, "--no-wait"}, Env(kApprovalToken));
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  std::string id = r.out.substr(0, r.out.find('\n'));
  json approval = WaitForApproval(code);
  ASSERT_TRUE(approval.is_object());
  EXPECT_EQ(approval["id"], id);
  EXPECT_EQ(approval["language"], "python");
  auto status = RunKiln({"status", id, "--json"}, Env(kApprovalToken));
  EXPECT_EQ(Parse(status.out)["status"], "awaiting_approval") << status.out;
  // The human-readable list shows the code to review.
  auto listed = RunKiln({"approvals"}, Env(kApprovalToken));
  EXPECT_THAT(listed.out, HasSubstr(id));
  EXPECT_THAT(listed.out, HasSubstr("    | " + code));
  // A tenant token cannot approve.
  auto refused = RunKiln({"--token", kApprovalToken, "approve", id}, Env(kApprovalToken));
  EXPECT_EQ(refused.exit_code, 64) << refused.Describe();
  EXPECT_THAT(refused.err, HasSubstr("FORBIDDEN"));

  auto approved = RunKiln({"approve", id}, Env(kApprovalToken));
  EXPECT_EQ(approved.exit_code, 0) << approved.Describe();
  EXPECT_THAT(approved.out, HasSubstr(id + " approved"));
  json record;
  bool ended = WaitFor(
      [&] {
        record = Parse(RunKiln({"status", id, "--json"}, Env(kApprovalToken)).out);
        return record.value("status", "") == "succeeded";
      },
      std::chrono::seconds(30));
  EXPECT_TRUE(ended) << record.dump();
  EXPECT_EQ(record["stdout"], "approved 42\n");
}

TEST_F(ApprovalCliTest, DeniedJobEndsRejectedAndKilnRunExits77) {
  const std::string code = "echo must-not-run";
  KilnRun waiting;
  std::jthread runner([&] {
    waiting = RunKiln({"run", "-l", "shell", "-c", code}, Env(kApprovalToken));
  });
  json approval = WaitForApproval(code);
  ASSERT_TRUE(approval.is_object());
  auto denied = RunKiln({"deny", approval["id"].get<std::string>()}, Env(kApprovalToken));
  EXPECT_EQ(denied.exit_code, 0) << denied.Describe();
  runner.join();
  EXPECT_EQ(waiting.exit_code, 77) << waiting.Describe();
  EXPECT_EQ(waiting.out, "");
  EXPECT_THAT(waiting.err, HasSubstr("APPROVAL_DENIED"));
}

TEST_F(ApprovalCliTest, TrustSessionApprovesTheRestOfThatSessionOnly) {
  const std::string code = "echo first-in-session";
  KilnRun first;
  std::jthread runner([&] {
    first =
        RunKiln({"run", "-l", "shell", "-c", code, "--session", "trusted-1"}, Env(kApprovalToken));
  });
  json approval = WaitForApproval(code);
  ASSERT_TRUE(approval.is_object());
  auto approved = RunKiln({"approve", approval["id"].get<std::string>(), "--trust-session"},
                          Env(kApprovalToken));
  EXPECT_EQ(approved.exit_code, 0) << approved.Describe();
  runner.join();
  EXPECT_EQ(first.exit_code, 0) << first.Describe();
  // The next job of that session runs without anyone approving it.
  auto next = RunKiln({"run", "-l", "shell", "-c", "echo second-in-session", "--session",
                       "trusted-1", "--timeout", "5000"},
                      Env(kApprovalToken));
  EXPECT_EQ(next.exit_code, 0) << next.Describe();
  EXPECT_EQ(next.out, "second-in-session\n");
  // Another session still waits.
  auto other = RunKiln(
      {"run", "-l", "shell", "-c", "echo other-session", "--session", "other-1", "--no-wait"},
      Env(kApprovalToken));
  std::string id = other.out.substr(0, other.out.find('\n'));
  EXPECT_TRUE(WaitForApproval("echo other-session").is_object());
  RunKiln({"deny", id}, Env(kApprovalToken));
}

TEST_F(ApprovalCliTest, DisabledTenantIsRefused) {
  auto r = RunKiln({"run", "-l", "python", "-c", "print(1)"}, Env(kDisabledToken));
  EXPECT_EQ(r.exit_code, 64) << r.Describe();
  EXPECT_THAT(r.err, HasSubstr("CODE_EXECUTION_DISABLED"));
}

}  // namespace
}  // namespace kiln::testing
