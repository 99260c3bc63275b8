// The native client protocol (docs/protocol.md, "Client protocol") through a
// real cluster, spoken by a cppzmq DEALER: submit and subscribe, sessions,
// cancel, authorisation, hostile frames and many requests in flight on one
// socket.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <zmq.hpp>

#include "common/protocol/client_codec.hpp"
#include "tests/support/cluster.hpp"

namespace kiln::testing {
namespace {

namespace client = common::protocol::client;
using nlohmann::json;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

// One DEALER connected to a broker's client endpoint.
class NativeClient {
 public:
  NativeClient(zmq::context_t& ctx, const std::string& endpoint)
      : socket_(ctx, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::sndhwm, 0);
    socket_.set(zmq::sockopt::rcvhwm, 0);
    socket_.connect(endpoint);
  }

  void Send(const client::Message& m) { SendRaw(client::Encode(m)); }
  void SendRaw(const std::string& frame) {
    socket_.send(zmq::buffer(frame), zmq::send_flags::none);
  }
  zmq::socket_t& socket() { return socket_; }

  // The next message, or nothing within `timeout`.
  std::optional<client::Message> Recv(std::chrono::milliseconds timeout) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, timeout) == 0) return std::nullopt;
    zmq::message_t msg;
    if (!socket_.recv(msg, zmq::recv_flags::none)) return std::nullopt;
    auto m = client::Decode(msg.to_string_view());
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    if (!m.ok()) return std::nullopt;
    return *m;
  }

  // Every message for `request_id` up to and including its Result or Error
  // (messages for other requests are kept for later calls).
  std::vector<client::Message> UntilEnd(uint64_t request_id,
                                        std::chrono::seconds timeout = std::chrono::seconds(60)) {
    std::vector<client::Message> got;
    const auto deadline = Clock::now() + timeout;
    auto& pending = pending_[request_id];
    while (true) {
      while (!pending.empty()) {
        got.push_back(pending.front());
        pending.erase(pending.begin());
        if (IsEnd(got.back())) return got;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return got;
      auto m = Recv(left);
      if (!m) return got;
      pending_[client::RequestIdOf(*m)].push_back(*m);
    }
  }

  // The first message for `request_id`.
  std::optional<client::Message> Next(
      uint64_t request_id, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    const auto deadline = Clock::now() + timeout;
    auto& pending = pending_[request_id];
    while (pending.empty()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return std::nullopt;
      auto m = Recv(left);
      if (!m) return std::nullopt;
      pending_[client::RequestIdOf(*m)].push_back(*m);
    }
    client::Message m = pending.front();
    pending.erase(pending.begin());
    return m;
  }

  static bool IsEnd(const client::Message& m) {
    return std::holds_alternative<client::Result>(m) || std::holds_alternative<client::Error>(m);
  }

 private:
  zmq::socket_t socket_;
  std::map<uint64_t, std::vector<client::Message>> pending_;
};

std::string Describe(const std::optional<client::Message>& m) {
  if (!m) return "(nothing)";
  if (auto* e = std::get_if<client::Error>(&*m)) return "error " + e->code + ": " + e->message;
  return client::TypeName(client::TypeOf(*m));
}

template <typename T>
const T& As(const std::optional<client::Message>& m) {
  static const T kEmpty{};
  EXPECT_TRUE(m && std::holds_alternative<T>(*m)) << Describe(m);
  if (!m || !std::holds_alternative<T>(*m)) return kEmpty;
  return std::get<T>(*m);
}

class NativeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = TestCluster::Start({.brokers = 1, .workers = 2, .slots = 4}).release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_->DumpLogs();
  }

  TestCluster& c() { return *cluster_; }
  NativeClient Client() { return NativeClient(ctx_, c().client_endpoint()); }

  static client::Submit SubmitOf(uint64_t request_id, const json& body, bool subscribe = false,
                                 const std::string& token = TestCluster::kToken) {
    return client::Submit{request_id, token, body.dump(), "", subscribe};
  }

  static TestCluster* cluster_;
  zmq::context_t ctx_{1};
};

TestCluster* NativeTest::cluster_ = nullptr;

// Output arrives as it is produced, in order, then exactly one result equal
// to what GET /v1/executions/{id} answers.
TEST_F(NativeTest, SubmitThenSubscribeStreamsOutputThenResult) {
  NativeClient cl = Client();
  cl.Send(SubmitOf(1, {{"language", "python"},
                       {"code",
                        "import sys, time\n"
                        "for i in range(6):\n"
                        "    print('line', i, flush=True)\n"
                        "    if i == 2: print('oops', file=sys.stderr, flush=True)\n"
                        "    time.sleep(0.2)\n"}}));
  const auto accepted = As<client::Accepted>(cl.Next(1));
  ASSERT_FALSE(accepted.id.empty());
  EXPECT_THAT(accepted.status, ::testing::AnyOf("queued", "awaiting_approval"));
  cl.Send(client::Subscribe{2, TestCluster::kToken, accepted.id});
  auto events = cl.UntilEnd(2);
  ASSERT_FALSE(events.empty());
  ASSERT_TRUE(std::holds_alternative<client::Result>(events.back())) << Describe(events.back());
  std::string out, err;
  uint64_t next_seq = 0;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const auto& o = std::get<client::Output>(events[i]);  // only output before the result
    EXPECT_EQ(o.request_id, 2u);
    EXPECT_EQ(o.id, accepted.id);
    EXPECT_EQ(o.seq, next_seq++) << "chunks in order, none missing";
    (o.stream == common::protocol::Stream::kStdout ? out : err) += o.data;
  }
  EXPECT_GE(events.size(), 3u);
  EXPECT_EQ(out, "line 0\nline 1\nline 2\nline 3\nline 4\nline 5\n");
  EXPECT_EQ(err, "oops\n");
  const auto& result = std::get<client::Result>(events.back());
  EXPECT_EQ(result.request_id, 2u);
  EXPECT_EQ(result.id, accepted.id);
  json record = json::parse(result.record_json);
  EXPECT_EQ(record["status"], "succeeded");
  EXPECT_EQ(record["stdout"], out);
  EXPECT_EQ(record["stderr"], err);
  auto get = c().Request("GET", "/v1/executions/" + accepted.id);
  EXPECT_EQ(get.status, 200);
  EXPECT_EQ(record, get.body);
  // Exactly one result: nothing more comes for that request.
  EXPECT_FALSE(cl.Next(2, std::chrono::milliseconds(500)).has_value());

  // get answers the same record; a late subscriber gets the full replay.
  cl.Send(client::Get{3, TestCluster::kToken, accepted.id});
  EXPECT_EQ(json::parse(As<client::Result>(cl.Next(3)).record_json), get.body);
  cl.Send(client::Subscribe{4, TestCluster::kToken, accepted.id});
  auto replay = cl.UntilEnd(4);
  ASSERT_EQ(replay.size(), events.size());
  for (size_t i = 0; i + 1 < replay.size(); ++i) {
    auto o = std::get<client::Output>(replay[i]);
    auto e = std::get<client::Output>(events[i]);
    o.request_id = e.request_id;
    EXPECT_EQ(o, e);
  }
  // A client that reconnects resumes after the last chunk it saw: from_seq
  // skips what it has, then the rest and the result follow.
  ASSERT_GE(events.size(), 3u);
  const uint64_t seen = std::get<client::Output>(events[0]).seq;
  cl.Send(client::Subscribe{5, TestCluster::kToken, accepted.id, seen + 1});
  auto resumed = cl.UntilEnd(5);
  ASSERT_EQ(resumed.size(), events.size() - 1);
  for (size_t i = 0; i + 1 < resumed.size(); ++i) {
    auto o = std::get<client::Output>(resumed[i]);
    auto e = std::get<client::Output>(events[i + 1]);
    o.request_id = e.request_id;
    EXPECT_EQ(o, e);
  }
  EXPECT_TRUE(std::holds_alternative<client::Result>(resumed.back()));
}

// The first chunk arrives long before the job ends (live, not replayed).
TEST_F(NativeTest, OutputIsLive) {
  NativeClient cl = Client();
  cl.Send(SubmitOf(
      1,
      {{"language", "python"},
       {"code", "import time\nprint('first', flush=True)\ntime.sleep(3)\nprint('last')\n"}},
      /*subscribe=*/true));
  As<client::Accepted>(cl.Next(1));
  const auto t0 = Clock::now();
  auto first = cl.Next(1);
  const auto first_at = Clock::now() - t0;
  EXPECT_EQ(As<client::Output>(first).data, "first\n");
  auto rest = cl.UntilEnd(1);
  const auto end_at = Clock::now() - t0;
  ASSERT_FALSE(rest.empty());
  EXPECT_EQ(json::parse(As<client::Result>(rest.back()).record_json)["status"], "succeeded");
  EXPECT_LT(first_at + std::chrono::milliseconds(1500), end_at)
      << "the first chunk came with the end, not live";
}

// State survives between calls of one session, submitted natively.
TEST_F(NativeTest, SessionJob) {
  NativeClient cl = Client();
  cl.Send(
      SubmitOf(1, {{"language", "python"}, {"code", "x = 41"}, {"session_id", "native-s1"}}, true));
  As<client::Accepted>(cl.Next(1));
  auto first = cl.UntilEnd(1);
  ASSERT_FALSE(first.empty());
  json r1 = json::parse(As<client::Result>(first.back()).record_json);
  EXPECT_EQ(r1["status"], "succeeded") << r1.dump();
  EXPECT_EQ(r1["session_id"], "native-s1");
  cl.Send(SubmitOf(
      2, {{"language", "python"}, {"code", "print(x + 1)"}, {"session_id", "native-s1"}}, true));
  As<client::Accepted>(cl.Next(2));
  auto second = cl.UntilEnd(2);
  ASSERT_EQ(second.size(), 2u) << "one output chunk, then the result";
  EXPECT_EQ(As<client::Output>(second[0]).data, "42\n");
  json r2 = json::parse(As<client::Result>(second.back()).record_json);
  EXPECT_EQ(r2["status"], "succeeded");
  EXPECT_EQ(r2["stdout"], "42\n");
  // Another tenant cannot use the session.
  cl.Send(SubmitOf(3, {{"language", "python"}, {"code", "print(x)"}, {"session_id", "native-s1"}},
                   true, TestCluster::kOtherToken));
  auto other = cl.UntilEnd(3);
  ASSERT_FALSE(other.empty());
  if (std::holds_alternative<client::Error>(other.back())) {
    EXPECT_THAT(std::get<client::Error>(other.back()).code, HasSubstr("SESSION"));
  } else {
    json r3 = json::parse(As<client::Result>(other.back()).record_json);
    EXPECT_NE(r3["stdout"], "41\n") << "another tenant saw tenant-a's session";
  }
}

TEST_F(NativeTest, CancelEndsARunningJob) {
  NativeClient cl = Client();
  cl.Send(SubmitOf(1,
                   {{"language", "python"},
                    {"code", "import time\nprint('started', flush=True)\ntime.sleep(30)\n"}},
                   true));
  const auto accepted = As<client::Accepted>(cl.Next(1));
  EXPECT_EQ(As<client::Output>(cl.Next(1)).data, "started\n");  // running now
  const auto t0 = Clock::now();
  cl.Send(client::Cancel{2, TestCluster::kToken, accepted.id});
  auto reply = cl.Next(2);
  ASSERT_TRUE(reply.has_value());
  if (auto* a = std::get_if<client::Accepted>(&*reply)) {
    EXPECT_EQ(a->id, accepted.id);
  } else {
    EXPECT_EQ(json::parse(As<client::Result>(reply).record_json)["status"], "cancelled");
  }
  auto rest = cl.UntilEnd(1, std::chrono::seconds(20));
  ASSERT_FALSE(rest.empty());
  json record = json::parse(As<client::Result>(rest.back()).record_json);
  EXPECT_EQ(record["status"], "cancelled") << record.dump();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(15));
  // Cancelling it again answers its record.
  cl.Send(client::Cancel{3, TestCluster::kToken, accepted.id});
  EXPECT_EQ(json::parse(As<client::Result>(cl.Next(3)).record_json)["status"], "cancelled");
}

TEST_F(NativeTest, TokensAreChecked) {
  NativeClient cl = Client();
  cl.Send(SubmitOf(11, {{"language", "python"}, {"code", "print(1)"}}, false, "not-a-token"));
  auto e = As<client::Error>(cl.Next(11));
  EXPECT_EQ(e.request_id, 11u);
  EXPECT_EQ(e.code, "UNAUTHORIZED");
  EXPECT_FALSE(e.retryable);
  cl.Send(SubmitOf(12, {{"language", "python"}, {"code", "print(1)"}}, false,
                   TestCluster::kAdminToken));
  EXPECT_EQ(As<client::Error>(cl.Next(12)).code, "FORBIDDEN");
  // A tenant-a job is invisible to tenant-b and to a wrong token.
  cl.Send(SubmitOf(13, {{"language", "python"}, {"code", "print(1)"}}, true));
  const auto accepted = As<client::Accepted>(cl.Next(13));
  cl.UntilEnd(13);
  cl.Send(client::Get{14, TestCluster::kOtherToken, accepted.id});
  EXPECT_EQ(As<client::Error>(cl.Next(14)).code, "NOT_FOUND");
  cl.Send(client::Subscribe{15, "wrong-token-123", accepted.id});
  EXPECT_EQ(As<client::Error>(cl.Next(15)).code, "UNAUTHORIZED");
  cl.Send(client::Cancel{16, TestCluster::kOtherToken, accepted.id});
  EXPECT_EQ(As<client::Error>(cl.Next(16)).code, "NOT_FOUND");
  cl.Send(client::Get{17, TestCluster::kToken, "ex_does_not_exist"});
  EXPECT_EQ(As<client::Error>(cl.Next(17)).code, "NOT_FOUND");
  // The submit body gets the same validation as over HTTP.
  cl.Send(SubmitOf(18, {{"language", "cobol"}, {"code", "x"}}));
  EXPECT_EQ(As<client::Error>(cl.Next(18)).code, "INVALID_REQUEST");
  cl.Send(client::Submit{19, TestCluster::kToken, "{not json", "", false});
  EXPECT_EQ(As<client::Error>(cl.Next(19)).code, "INVALID_REQUEST");

  // The broker counts native requests by type and errors by code.
  const std::string metrics = c().Request("GET", "/metrics").raw;
  auto sample = [&](const std::string& series) {
    auto at = metrics.find("\n" + series + " ");
    return at == std::string::npos ? -1.0 : std::stod(metrics.substr(at + series.size() + 2));
  };
  EXPECT_GE(sample(R"(kiln_native_requests_total{type="submit"})"), 5) << metrics;
  EXPECT_GE(sample(R"(kiln_native_requests_total{type="get"})"), 2) << metrics;
  EXPECT_GE(sample(R"(kiln_native_errors_total{code="UNAUTHORIZED"})"), 2) << metrics;
  EXPECT_GE(sample(R"(kiln_native_errors_total{code="NOT_FOUND"})"), 3) << metrics;
  EXPECT_GE(sample("kiln_native_subscriptions"), 0) << metrics;
}

TEST_F(NativeTest, HostileFramesGetErrorsAndHarmNothing) {
  NativeClient cl = Client();
  auto expect_invalid = [&](const std::string& frame, const std::string& what,
                            uint64_t request_id = 0) {
    cl.SendRaw(frame);
    auto e = As<client::Error>(cl.Next(request_id, std::chrono::seconds(10)));
    EXPECT_EQ(e.code, "INVALID_REQUEST") << what;
    EXPECT_EQ(e.request_id, request_id) << what;
    return e.message;
  };
  expect_invalid("garbage", "not msgpack");
  expect_invalid(std::string(), "empty frame");
  expect_invalid("\x93\x01\x63", "truncated");
  std::string unknown = client::Encode(client::Get{5, TestCluster::kToken, "x"});
  unknown[2] = 99;  // [1, 4, {...}] -> type 99
  EXPECT_THAT(expect_invalid(unknown, "unknown type", 5), HasSubstr("unknown message type 99"));
  EXPECT_THAT(expect_invalid(client::Encode(client::Accepted{6, "ex_1", "queued"}), "a reply", 6),
              HasSubstr("not a request"));
  // A request_id is echoed even when the rest of the request is wrong.
  std::string no_id = client::Encode(client::Get{7, TestCluster::kToken, "x"});
  EXPECT_THAT(expect_invalid(no_id.substr(0, no_id.size() - 2) + "\x01", "bad id type", 7),
              HasSubstr("get.id"));
  // Two frames in one message.
  cl.socket().send(zmq::str_buffer("a"), zmq::send_flags::sndmore);
  cl.socket().send(zmq::str_buffer("b"), zmq::send_flags::none);
  EXPECT_THAT(As<client::Error>(cl.Next(0)).message, HasSubstr("exactly one frame"));
  // A request body over broker.http.max_body_bytes (16 MiB by default).
  json big = {{"language", "python"},
              {"code", "print(1)"},
              {"input", {{"pad", std::string(17u << 20, 'x')}}}};
  cl.Send(client::Submit{8, TestCluster::kToken, big.dump(), "", false});
  EXPECT_THAT(As<client::Error>(cl.Next(8)).message, HasSubstr("request body limit"));
  // A frame over the protocol's 64 MiB: ZeroMQ drops that connection; the
  // broker goes on serving everyone.
  {
    NativeClient huge = Client();
    huge.SendRaw(std::string((64u << 20) + 16, '\x01'));
    EXPECT_FALSE(huge.Next(0, std::chrono::seconds(2)).has_value());
  }
  // Random junk, many frames of it.
  std::mt19937 rng(7);
  for (int i = 0; i < 300; ++i) {
    std::string junk(1 + rng() % 64, '\0');
    for (char& ch : junk) ch = static_cast<char>(rng());
    cl.SendRaw(junk);
  }
  int errors = 0;
  while (auto m = cl.Next(0, std::chrono::seconds(5))) {
    if (std::holds_alternative<client::Error>(*m)) ++errors;
    if (errors == 300) break;
  }
  EXPECT_EQ(errors, 300) << "every junk frame is answered";
  // Still serving, on this socket and a new one.
  for (NativeClient* each : {&cl}) {
    each->Send(SubmitOf(9, {{"language", "shell"}, {"code", "echo alive"}}, true));
    As<client::Accepted>(each->Next(9));
    auto end = each->UntilEnd(9);
    ASSERT_FALSE(end.empty());
    EXPECT_EQ(json::parse(As<client::Result>(end.back()).record_json)["stdout"], "alive\n");
  }
  NativeClient fresh = Client();
  fresh.Send(client::Get{1, TestCluster::kToken, "ex_nope"});
  EXPECT_EQ(As<client::Error>(fresh.Next(1)).code, "NOT_FOUND");
  EXPECT_EQ(c().Request("GET", "/v1/health").status, 200);
}

// 200 jobs in flight on one socket, each with its own request_id: every
// one gets its own accepted, output and result, none mixed up.
TEST_F(NativeTest, TwoHundredJobsPipelinedOnOneSocket) {
  NativeClient cl = Client();
  constexpr int kJobs = 200;
  const auto t0 = Clock::now();
  for (int i = 0; i < kJobs; ++i) {
    cl.Send(SubmitOf(1000 + i, {{"language", "shell"}, {"code", "echo job-" + std::to_string(i)}},
                     /*subscribe=*/true));
  }
  std::map<uint64_t, std::string> output;
  std::map<uint64_t, json> records;
  std::map<uint64_t, std::string> ids;
  const auto deadline = Clock::now() + std::chrono::seconds(240);
  while (records.size() < kJobs && Clock::now() < deadline) {
    auto m = cl.Recv(std::chrono::seconds(30));
    ASSERT_TRUE(m.has_value()) << "stalled with " << records.size() << " results";
    const uint64_t rid = client::RequestIdOf(*m);
    ASSERT_GE(rid, 1000u);
    ASSERT_LT(rid, 1000u + kJobs);
    if (auto* a = std::get_if<client::Accepted>(&*m)) {
      EXPECT_TRUE(ids.emplace(rid, a->id).second) << "two accepted for " << rid;
    } else if (auto* o = std::get_if<client::Output>(&*m)) {
      EXPECT_EQ(o->id, ids[rid]) << "output before accepted, or for another job";
      output[rid] += o->data;
    } else if (auto* r = std::get_if<client::Result>(&*m)) {
      EXPECT_EQ(r->id, ids[rid]);
      EXPECT_TRUE(records.emplace(rid, json::parse(r->record_json)).second)
          << "two results for " << rid;
    } else {
      FAIL() << Describe(m);
    }
  }
  ASSERT_EQ(records.size(), static_cast<size_t>(kJobs));
  std::set<std::string> distinct;
  for (int i = 0; i < kJobs; ++i) {
    const std::string want = "job-" + std::to_string(i) + "\n";
    EXPECT_EQ(output[1000 + i], want);
    EXPECT_EQ(records[1000 + i]["status"], "succeeded") << records[1000 + i].dump();
    EXPECT_EQ(records[1000 + i]["stdout"], want);
    distinct.insert(ids[1000 + i]);
  }
  EXPECT_EQ(distinct.size(), static_cast<size_t>(kJobs));
  std::cerr << "200 pipelined shell jobs took "
            << std::chrono::duration<double>(Clock::now() - t0).count() << " s\n";
}

}  // namespace
}  // namespace kiln::testing
