#include "broker/job/job.hpp"

#include <gtest/gtest.h>

#include "broker/job/lifecycle.hpp"
#include "common/audit/sha256.hpp"

namespace kiln::broker {
namespace {

namespace protocol = common::protocol;

// `r` after its worker's Result: the lifecycle's Result transition of it running.
void ApplyResult(JobRecord& r, const protocol::Result& res, int64_t now_ms) {
  r.status = JobStatus::kRunning;
  auto t = JobLifecycle::Apply(r, {.event = JobEvent::kResult, .now_ms = now_ms, .result = &res});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  r = t->record;
}

JobSpec Spec() {
  JobSpec s;
  s.id = "ex_1";
  s.tenant = "acme";
  s.language = "python";
  s.code = "print(1)";
  s.input_json = R"({"a":1})";
  s.env = {{"K", "V"}};
  s.files = {{"a.txt", std::string("\0\1bin", 5)}};
  s.collect = {"*.png"};
  s.limits = {1000, 64, 900, 4096, 16};
  s.created_ms = 123;
  return s;
}

TEST(Job, SpecRoundTripsThroughJson) {
  JobSpec s = Spec();
  auto back = JobSpec::FromJson(s.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->ToJson(), s.ToJson());
  EXPECT_EQ(back->files[0].content, s.files[0].content);
}

TEST(Job, SpecKeepsItsIsolationLevel) {
  JobSpec s = Spec();
  s.isolation = "gvisor";
  auto back = JobSpec::FromJson(s.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->isolation, "gvisor");
  EXPECT_EQ(s.Excerpt().isolation, "gvisor");  // a refused job's stored excerpt too
  // A spec stored before levels existed ran at the only one there was.
  auto old = s.ToJson();
  old.erase("isolation");
  back = JobSpec::FromJson(old);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->isolation, "standard");
}

TEST(Job, ExecuteCarriesTheLevelOnlyWhenNotStandard) {
  JobSpec s = Spec();
  EXPECT_EQ(s.ToExecute().isolation, "");  // workers without levels see nothing new
  s.isolation = "gvisor";
  EXPECT_EQ(s.ToExecute().isolation, "gvisor");
}

TEST(Job, RecordShowsTheLevelWhenNotStandard) {
  JobSpec s = Spec();
  EXPECT_FALSE(JobRecord::Queued(s).ToJson().contains("isolation"));
  s.isolation = "gvisor";
  JobRecord r = JobRecord::Queued(s);
  auto j = r.ToJson();
  EXPECT_EQ(j["isolation"], "gvisor");
  EXPECT_EQ(j["language"], "python");  // the language stays the plain language
  auto back = JobRecord::FromJson(j);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->isolation, "gvisor");
  EXPECT_EQ(back->ToJson(), j);
}

TEST(Job, PlacementTokensNameTheLevelUnlessStandard) {
  EXPECT_EQ(PlacementToken("python", "standard"), "python");
  EXPECT_EQ(PlacementToken("python", ""), "python");
  EXPECT_EQ(PlacementToken("python", "gvisor"), "python@gvisor");
  EXPECT_TRUE(IsIsolationLevel("standard"));
  EXPECT_TRUE(IsIsolationLevel("gvisor"));
  EXPECT_FALSE(IsIsolationLevel(""));
  EXPECT_FALSE(IsIsolationLevel("kata"));
  EXPECT_EQ(WireIsolation("standard"), "");
  EXPECT_EQ(WireIsolation("gvisor"), "gvisor");
}

TEST(Job, ExcerptKeepsTheHeadOfTheCodeAndTheDigestsOnly) {
  JobSpec s = Spec();
  s.code = std::string(5000, 'x') + "tail";
  s.warnings = {"rule"};
  JobSpec e = s.Excerpt();
  EXPECT_EQ(e.id, s.id);
  EXPECT_EQ(e.tenant, s.tenant);
  EXPECT_EQ(e.limits, s.limits);
  EXPECT_EQ(e.warnings, s.warnings);
  EXPECT_EQ(e.code.substr(0, kCodeExcerptBytes), std::string(kCodeExcerptBytes, 'x'));
  EXPECT_EQ(e.code.substr(kCodeExcerptBytes),
            "\n[kiln: excerpt: the first 4096 of 5004 bytes; 908 bytes cut]");
  EXPECT_TRUE(e.input_json.empty());
  EXPECT_TRUE(e.env.empty()) << "env may hold secrets";
  EXPECT_TRUE(e.files.empty());
  EXPECT_TRUE(e.collect.empty());
  ASSERT_TRUE(e.excerpt_of.has_value());
  EXPECT_EQ(e.excerpt_of->code_bytes, 5004u);
  EXPECT_EQ(e.excerpt_of->code_sha256, common::Sha256Hex(s.code));
  EXPECT_EQ(e.excerpt_of->input_sha256, common::Sha256Hex(s.input_json));
  // Stored and read back; an excerpt of an excerpt is the same excerpt.
  auto back = JobSpec::FromJson(e.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->excerpt_of, e.excerpt_of);
  EXPECT_EQ(back->ToJson(), e.ToJson());
  EXPECT_EQ(e.Excerpt().ToJson(), e.ToJson());
  EXPECT_FALSE(Spec().ToJson().contains("excerpt_of"));
  // Short code is kept whole (still without input, env, files).
  JobSpec small = Spec().Excerpt();
  EXPECT_EQ(small.code, "print(1)");
  EXPECT_EQ(small.excerpt_of->code_bytes, 8u);
}

TEST(Job, ExcerptNeverSplitsAUtf8Character) {
  JobSpec s = Spec();
  s.code =
      std::string(kCodeExcerptBytes - 1, 'x') + "\u00e9\u00e9";  // a 2-byte char across the cut
  JobSpec e = s.Excerpt();
  EXPECT_EQ(e.code.substr(0, kCodeExcerptBytes), std::string(kCodeExcerptBytes - 1, 'x') + "\n");
  EXPECT_NE(e.code.find("the first 4095 of 4099 bytes"), std::string::npos) << e.code;
  EXPECT_EQ(e.excerpt_of->code_sha256, common::Sha256Hex(s.code));
}

// A worker's error code is passed on only when it blames the job's input; a
// (possibly hostile) worker cannot make the broker answer any other code.
TEST(Job, WorkerErrorCodesArePassedOnOnlyForTheJobsOwnInput) {
  std::vector<std::pair<std::string, std::string>> cases = {
      {"INVALID_REQUEST", "INVALID_REQUEST"},
      {"LIMIT_EXCEEDED", "LIMIT_EXCEEDED"},
      {"PACKAGE_INSTALL_FAILED", "PACKAGE_INSTALL_FAILED"},
      {"UNAUTHORIZED", "INTERNAL"},
      {"QUEUE_FULL", "INTERNAL"},
      {"", "INTERNAL"},
      {"invalid_request", "INTERNAL"},
  };
  for (const auto& [sent, answered] : cases) {
    JobRecord r = JobRecord::Queued(Spec());
    protocol::Result res;
    res.reason = protocol::EndReason::kError;
    res.worker_error = "writing input files: d.csv is not a regular file";
    res.worker_error_code = sent;
    ApplyResult(r, res, 5);
    EXPECT_EQ(r.status, JobStatus::kError);
    ASSERT_TRUE(r.error.has_value());
    EXPECT_EQ(r.error->code, answered) << sent;
    EXPECT_NE(r.error->message.find("d.csv"), std::string::npos);
  }
}

// A violation names the call the worker saw; anything that is not a short
// call name (a hostile worker's text) is left out of the tenant's message.
TEST(Job, ViolationsNameTheCallOnlyWhenItLooksLikeOne) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"kexec_load", "the sandbox killed the program for a forbidden system call: kexec_load"},
      {"a system call of a foreign ABI (arch 0xc000003e, nr 1073741989)",
       "the sandbox killed the program for a forbidden system call: a system call of a foreign "
       "ABI (arch 0xc000003e, nr 1073741989)"},
      {"", "the sandbox killed the program for a forbidden system call"},
      {"see https://evil.example/", "the sandbox killed the program for a forbidden system call"},
      {"x\nINTERNAL", "the sandbox killed the program for a forbidden system call"},
      {std::string(200, 'a'), "the sandbox killed the program for a forbidden system call"},
  };
  for (const auto& [sent, message] : cases) {
    JobRecord r = JobRecord::Queued(Spec());
    protocol::Result res;
    res.reason = protocol::EndReason::kSandboxViolation;
    res.worker_error = sent;
    ApplyResult(r, res, 5);
    EXPECT_EQ(r.status, JobStatus::kFailed);
    ASSERT_TRUE(r.error.has_value());
    EXPECT_EQ(r.error->code, "SECURITY_BLOCKED");
    EXPECT_EQ(r.error->message, message) << sent;
  }
}

TEST(Job, SessionEpochsParseAsRedisKeepsThem) {
  EXPECT_EQ(SessionEpoch::Parse("17/3"), (SessionEpoch{17, 3}));
  EXPECT_EQ(SessionEpoch::Parse("17"), (SessionEpoch{17, 1})) << "written before generations";
  EXPECT_EQ((SessionEpoch{17, 3}).ToString(), "17/3");
  for (const char* bad : {"", "/", "17/", "/3", "x/3", "17/3/1", "-1/2", "17 /3", "1e3"}) {
    EXPECT_FALSE(SessionEpoch::Parse(bad).has_value()) << bad;
  }
}

TEST(Job, RecordRoundTripsThroughJson) {
  JobRecord r = JobRecord::Queued(Spec());
  protocol::Result res;
  res.reason = protocol::EndReason::kExit;
  res.exit_code = 1;
  res.stdout_data = "out";
  res.stderr_data = "err";
  res.result_json = R"({"x":[1,2]})";
  res.error = protocol::ErrorInfo{"ValueError", "bad", "Traceback..."};
  res.duration_ms = 3.5;
  res.cpu_ms = 2;
  res.max_rss_kb = 900;
  res.files = {{"o.txt", "data"}};
  r.worker = "w1";
  ApplyResult(r, res, 99);
  auto j = r.ToJson();
  EXPECT_EQ(j["result"]["x"][1], 2);
  EXPECT_EQ(j["error"]["type"], "ValueError");
  EXPECT_EQ(j["usage"]["max_rss_kb"], 900);
  auto back = JobRecord::FromJson(j);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->ToJson(), j);
}

TEST(Job, RecordSaysWhenCollectLeftFilesOut) {
  JobRecord r = JobRecord::Queued(Spec());
  protocol::Result res;
  res.reason = protocol::EndReason::kExit;
  res.exit_code = 0;
  res.files = {{"a.txt", "a"}};
  res.files_truncated = true;
  res.files_omitted = 44;
  ApplyResult(r, res, 1);
  auto j = r.ToJson();
  EXPECT_EQ(j["files"].size(), 1u);
  EXPECT_EQ(j["files_truncated"], true);
  EXPECT_EQ(j["files_omitted"], 44);
  auto back = JobRecord::FromJson(j);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->files_truncated);
  EXPECT_EQ(back->files_omitted, 44u);
  // A complete collection says so; records stored before the fields existed read as complete.
  JobRecord whole = JobRecord::Queued(Spec());
  EXPECT_EQ(whole.ToJson()["files_truncated"], false);
  EXPECT_EQ(whole.ToJson()["files_omitted"], 0);
  auto old = whole.ToJson();
  old.erase("files_truncated");
  old.erase("files_omitted");
  auto read = JobRecord::FromJson(old);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_FALSE(read->files_truncated);
}

TEST(Job, SpecCarriesStdinToTheWorker) {
  JobSpec s = Spec();
  s.stdin_data = "line\n";
  auto back = JobSpec::FromJson(s.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->stdin_data, "line\n");
  EXPECT_EQ(back->ToExecute().stdin_data, "line\n");
  EXPECT_TRUE(s.Excerpt().stdin_data.empty());  // a refused job keeps none of its input
  auto old = s.ToJson();
  old.erase("stdin");  // stored before stdin existed
  back = JobSpec::FromJson(old);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->stdin_data.empty());
}

TEST(Job, SpecCarriesPackagesToTheWorker) {
  JobSpec s = Spec();
  s.packages = {"tabulate==0.9.0", "humanize"};
  auto back = JobSpec::FromJson(s.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->packages, s.packages);
  EXPECT_EQ(back->ToExecute().packages, s.packages);
  auto old = s.ToJson();
  old.erase("packages");  // stored before packages existed
  back = JobSpec::FromJson(old);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->packages.empty());
}

TEST(Job, SpecCarriesNetworkToTheWorkerAndRecordsKeepTheAccount) {
  JobSpec s = Spec();
  s.network = true;
  s.network_allow = {"api.example.test:443"};
  s.network_max_bytes = 4096;
  s.network_max_connections = 3;
  auto back = JobSpec::FromJson(s.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->network);
  const protocol::Execute e = back->ToExecute();
  EXPECT_EQ(e.network_allow, s.network_allow);
  EXPECT_EQ(e.network_max_bytes, 4096u);
  EXPECT_EQ(e.network_max_connections, 3u);
  JobSpec none = Spec();
  EXPECT_FALSE(none.ToJson().contains("network"));  // specs without it read as before
  EXPECT_TRUE(none.ToExecute().network_allow.empty());

  JobRecord r = JobRecord::Queued(s);
  r.network = common::NetworkUsage{.connections = 1, .bytes_in = 7};
  auto again = JobRecord::FromJson(r.ToJson());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ASSERT_TRUE(again->network.has_value());
  EXPECT_EQ(*again->network, *r.network);
}

// Text outputs are strings, the rest base64 (as `files`); the record round-trips.
TEST(Job, RecordCarriesRichOutputs) {
  JobRecord r = JobRecord::Queued(Spec());
  protocol::Result res;
  res.reason = protocol::EndReason::kExit;
  res.exit_code = 0;
  res.outputs = {{"text/plain", "5"}, {"image/png", std::string("\x89PNG\0", 5)}};
  ApplyResult(r, res, 1);
  auto j = r.ToJson();
  ASSERT_EQ(j["outputs"].size(), 2u);
  EXPECT_EQ(j["outputs"][0], (nlohmann::json{{"mime", "text/plain"}, {"text", "5"}, {"size", 1}}));
  EXPECT_EQ(j["outputs"][1],
            (nlohmann::json{{"mime", "image/png"}, {"content_base64", "iVBORwA="}, {"size", 5}}));
  EXPECT_EQ(j["outputs_truncated"], false);
  auto back = JobRecord::FromJson(j);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->outputs, res.outputs);
  EXPECT_EQ(back->ToJson(), j);
  // Records stored before outputs existed read as none.
  auto old = JobRecord::Queued(Spec()).ToJson();
  old.erase("outputs");
  old.erase("outputs_truncated");
  back = JobRecord::FromJson(old);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->outputs.empty());
  EXPECT_FALSE(back->outputs_truncated);
}

// A hostile worker's outputs: bad mime types and anything past the bounds are
// dropped by the broker, which says so.
TEST(Job, BrokerRevalidatesAWorkersOutputs) {
  JobRecord r = JobRecord::Queued(Spec());
  protocol::Result res;
  res.reason = protocol::EndReason::kExit;
  res.exit_code = 0;
  res.outputs = {{"text/plain", "ok"},
                 {"text/html; charset=utf-8", "x"},
                 {"../../etc", "x"},
                 {"", "x"},
                 {"image/png", std::string(protocol::kMaxRichOutputBytes, 'p')},
                 {"image/svg+xml", "<svg/>"}};
  ApplyResult(r, res, 1);
  ASSERT_EQ(r.outputs.size(), 2u);
  EXPECT_EQ(r.outputs[0].mime, "text/plain");
  EXPECT_EQ(r.outputs[1].mime, "image/svg+xml");
  EXPECT_TRUE(r.outputs_truncated);

  JobRecord many = JobRecord::Queued(Spec());
  res.outputs.assign(40, {"text/plain", "x"});
  ApplyResult(many, res, 1);
  EXPECT_EQ(many.outputs.size(), protocol::kMaxRichOutputs);
  EXPECT_TRUE(many.outputs_truncated);

  // The worker's own flag is kept.
  JobRecord flagged = JobRecord::Queued(Spec());
  res.outputs = {{"text/plain", "x"}};
  res.outputs_truncated = true;
  ApplyResult(flagged, res, 1);
  EXPECT_TRUE(flagged.outputs_truncated);
}

}  // namespace
}  // namespace kiln::broker
