// The worker endpoint against hostile peers (docs/security.md, "Worker
// links"), through real clusters on loopback: with CURVE, a peer without an
// accepted key gets no job and no secret, an accepted key registers only as
// the worker it names and is dropped when revoked; with or without CURVE, a
// Result or output for a job comes only from the worker running it; and a
// broker that would take unauthenticated workers from other hosts does not
// start. Last, the native client endpoint with CURVE encryption.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <zmq.hpp>

#include "common/curve/curve_keys.hpp"
#include "common/protocol/client_codec.hpp"
#include "common/protocol/codec.hpp"
#include "common/protocol/messages.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/process.hpp"
#include "tests/support/rogue_worker.hpp"

namespace kiln::testing {
namespace {

namespace protocol = common::protocol;
using namespace std::chrono_literals;
using json = nlohmann::json;

double Metric(TestCluster& c, const std::string& series) {
  const std::string text = c.Request("GET", "/metrics").raw;
  auto at = text.find("\n" + series + " ");
  return at == std::string::npos ? -1.0 : std::stod(text.substr(at + series.size() + 2));
}

double Refused(TestCluster& c, const std::string& reason) {
  return Metric(c, "kiln_worker_refused_total{reason=\"" + reason + "\"}");
}

size_t Workers(TestCluster& c) {
  auto r = c.Request("GET", "/v1/workers", "", TestCluster::kAdminToken);
  return r.status == 200 ? r.body["workers"].size() : 0;
}

TEST(WorkerAuthTest, OnlyAcceptedKeysRegisterAndGetJobs) {
  auto c = TestCluster::Start({.brokers = 1, .workers = 2, .slots = 2, .curve = true});
  auto broker_public = common::ReadCurvePublicKeyFile(c->keys_dir() + "/broker.pub");
  ASSERT_TRUE(broker_public.ok()) << broker_public.status().ToString();
  auto unknown = common::GenerateCurveKeyPair();
  ASSERT_TRUE(unknown.ok());

  // A plain-text peer, and one with a key the broker does not accept, each
  // registering as a roomy worker (one under a real worker's id).
  RogueWorker plain(c->worker_endpoint());
  RogueWorker stranger(c->worker_endpoint(), *unknown, *broker_public);
  plain.Send(RogueRegistration("rogue-plain", {"python", "shell"}));
  stranger.Send(RogueRegistration(c->worker_id(0), {"python", "shell"}));

  // Jobs carrying a secret all run on the two real workers.
  for (int i = 0; i < 6; ++i) {
    auto r = c->Submit({{"language", "shell"},
                        {"code", "echo $TOKEN"},
                        {"env", {{"TOKEN", "s3cr3t-" + std::to_string(i)}}}});
    ASSERT_EQ(r.status, 200) << r.raw;
    EXPECT_EQ(r.body["status"], "succeeded") << r.raw;
    const std::string worker = r.body.value("worker", "");
    EXPECT_TRUE(worker == c->worker_id(0) || worker == c->worker_id(1)) << worker;
  }
  EXPECT_TRUE(plain.Drain(300ms).empty()) << "a plain-text peer got an answer";
  EXPECT_TRUE(stranger.Drain(300ms).empty()) << "a peer with an unknown key got an answer";
  EXPECT_EQ(Workers(*c), 2u) << c->DumpLogs();
  EXPECT_GE(Refused(*c, "unknown_key"), 1.0);

  // An accepted key registers only as the worker its file names.
  auto spare = common::GenerateCurveKeyPair();
  ASSERT_TRUE(spare.ok());
  WriteFile(c->accepted_keys_dir() + "/spare.pub", spare->public_z85 + "\n");
  RogueWorker impostor(c->worker_endpoint(), *spare, *broker_public);
  impostor.Send(RogueRegistration(c->worker_id(1), {"python"}));
  auto got = impostor.Drain(1500ms);
  EXPECT_TRUE(HasMessage(got, protocol::MessageType::kDisconnect)) << "no refusal";
  EXPECT_FALSE(HasMessage(got, protocol::MessageType::kRegisterAck))
      << "registered as another worker";
  EXPECT_GE(Refused(*c, "registration"), 1.0);
  EXPECT_EQ(Workers(*c), 2u);

  // As itself it registers (a runtime no job asks for: it gets none), and
  // is dropped within a key check or two of its file's removal, although
  // it keeps beating.
  impostor.Send(RogueRegistration("spare", {"cobol"}));
  got = impostor.Drain(1000ms);
  ASSERT_TRUE(HasMessage(got, protocol::MessageType::kRegisterAck)) << c->DumpLogs();
  got = impostor.Drain(1000ms);
  EXPECT_EQ(Workers(*c), 3u);
  std::filesystem::remove(c->accepted_keys_dir() + "/spare.pub");
  got = impostor.Drain(2500ms);
  EXPECT_TRUE(HasMessage(got, protocol::MessageType::kDisconnect))
      << "a revoked key kept its worker";
  EXPECT_EQ(Workers(*c), 2u);
  EXPECT_GE(Refused(*c, "revoked"), 1.0);
  // Whatever it sends now is refused: it is no worker any more.
  impostor.Send(RogueRegistration("spare", {"cobol"}));
  got = impostor.Drain(1000ms);
  EXPECT_FALSE(HasMessage(got, protocol::MessageType::kRegisterAck));

  // The real workers serve on.
  auto r = c->Submit({{"language", "python"}, {"code", "print(6 * 7)"}});
  EXPECT_EQ(r.body["status"], "succeeded") << r.raw;
  EXPECT_EQ(r.body["stdout"], "42\n");
  if (HasFailure()) std::cerr << c->DumpLogs();
}

TEST(WorkerAuthTest, ResultsAndOutputComeOnlyFromTheJobsWorker) {
  auto c = TestCluster::Start({.brokers = 1, .workers = 1, .slots = 1});
  auto submitted = c->Submit({{"language", "python"},
                              {"code", "import time\nprint('real', flush=True)\ntime.sleep(5)"},
                              {"wait", false}});
  ASSERT_EQ(submitted.status, 202) << submitted.raw;
  const std::string id = submitted.body.value("id", "");
  auto record = [&] { return c->Request("GET", "/v1/executions/" + id).body; };
  ASSERT_TRUE(WaitFor([&] { return record()["status"] == "running"; }, 10s));

  protocol::Result forged;
  forged.job_id = id;
  forged.exit_code = 0;
  forged.stdout_data = "forged\n";
  protocol::OutputChunk chunk{id, protocol::Stream::kStdout, 1, 0, "forged\n"};

  // From a connection that never registered: refused, and told to register.
  RogueWorker anon(c->worker_endpoint());
  anon.Send(forged);
  anon.Send(chunk);
  EXPECT_TRUE(HasMessage(anon.Drain(500ms), protocol::MessageType::kDisconnect));
  EXPECT_GE(Refused(*c, "unregistered"), 2.0);
  // From a registered worker the job does not run on: refused too (and
  // acknowledged, so it stops sending).
  RogueWorker other(c->worker_endpoint());
  other.Send(RogueRegistration("intruder", {"cobol"}));
  ASSERT_TRUE(HasMessage(other.Drain(1000ms), protocol::MessageType::kRegisterAck));
  other.Send(chunk);
  other.Send(forged);
  EXPECT_TRUE(HasMessage(other.Drain(1000ms), protocol::MessageType::kResultAck));
  EXPECT_GE(Refused(*c, "not_its_job"), 1.0);
  EXPECT_EQ(record()["status"], "running");

  // The job ends with its own result and its own output only.
  ASSERT_TRUE(WaitFor([&] { return record()["status"] == "succeeded"; }, 20s)) << record();
  EXPECT_EQ(record()["stdout"], "real\n");
  EXPECT_EQ(record()["worker"], c->worker_id(0));
  for (const auto& stored : c->OutputChunks(id)) {
    EXPECT_EQ(stored.data.find("forged"), std::string::npos) << "a foreign chunk was stored";
  }
  EXPECT_GE(Refused(*c, "not_its_job"), 2.0);
  if (HasFailure()) std::cerr << c->DumpLogs();
}

TEST(WorkerAuthTest, AnUnauthenticatedEndpointBeyondLoopbackDoesNotStart) {
  auto c = TestCluster::Start({.brokers = 1, .workers = 0});
  const std::string cfg = c->dir() + "/exposed.yaml";
  const std::string base =
      "broker:\n  workers: {endpoint: \"tcp://0.0.0.0:0\"}\n"
      "  http: {listen: \"127.0.0.1:0\"}\n"
      "  clients: {endpoint: \"\"}\n"
      "  redis: {url: \"redis://127.0.0.1:" +
      std::to_string(c->redis_port()) +
      "\"}\n"
      "tenants:\n  - {name: t, tokens: [\"t-token-0123456789\"]}\n";
  WriteFile(cfg, base);
  auto broker =
      ChildProcess::Start({std::string(KILN_BINARY_DIR) + "/bin/kiln-broker", "--config", cfg},
                          c->dir() + "/exposed.log");
  EXPECT_NE(broker.Wait(10s), 0);
  const std::string log = ReadFile(c->dir() + "/exposed.log");
  EXPECT_NE(log.find("reachable from other hosts without CURVE"), std::string::npos) << log;
}

TEST(WorkerAuthTest, NativeClientsSpeakCurveWhenTheBrokerHasAKey) {
  namespace client = common::protocol::client;
  // Workers with keys too: the native endpoint shares the ZAP handler.
  auto c = TestCluster::Start(
      {.brokers = 1, .workers = 1, .slots = 1, .curve = true, .curve_clients = true});
  zmq::context_t ctx(1);
  auto broker_public = common::ReadCurvePublicKeyFile(c->keys_dir() + "/broker.pub");
  ASSERT_TRUE(broker_public.ok());
  auto own = common::GenerateCurveKeyPair();  // any key: the token authenticates
  ASSERT_TRUE(own.ok());
  const client::Submit submit{1, TestCluster::kToken,
                              json{{"language", "python"}, {"code", "print(1)"}}.dump(), "",
                              /*subscribe=*/true};
  auto exchange = [&](zmq::socket_t& s) -> std::optional<client::Message> {
    s.set(zmq::sockopt::linger, 0);
    s.connect(c->client_endpoint());
    s.send(zmq::buffer(client::Encode(submit)), zmq::send_flags::none);
    for (auto until = std::chrono::steady_clock::now() + 20s;
         std::chrono::steady_clock::now() < until;) {
      zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, 1500ms) == 0) return std::nullopt;
      zmq::message_t m;
      if (!s.recv(m, zmq::recv_flags::none)) return std::nullopt;
      auto decoded = client::Decode(m.to_string_view());
      if (!decoded.ok()) return std::nullopt;
      if (std::holds_alternative<client::Result>(*decoded) ||
          std::holds_alternative<client::Error>(*decoded)) {
        return *decoded;
      }
    }
    return std::nullopt;
  };
  zmq::socket_t plain(ctx, zmq::socket_type::dealer);
  EXPECT_FALSE(exchange(plain).has_value()) << "a plain-text client was served";
  zmq::socket_t curve(ctx, zmq::socket_type::dealer);
  curve.set(zmq::sockopt::curve_serverkey, *broker_public);
  curve.set(zmq::sockopt::curve_publickey, own->public_z85);
  curve.set(zmq::sockopt::curve_secretkey, own->secret_z85);
  auto end = exchange(curve);
  ASSERT_TRUE(end.has_value()) << c->DumpLogs();
  auto* result = std::get_if<client::Result>(&*end);
  ASSERT_NE(result, nullptr);
  auto record = nlohmann::json::parse(result->record_json, nullptr, false);
  EXPECT_EQ(record.value("status", ""), "succeeded") << result->record_json;
  EXPECT_EQ(record.value("stdout", ""), "1\n");
}

}  // namespace
}  // namespace kiln::testing
