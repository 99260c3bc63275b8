// The native client protocol (docs/protocol.md, "Client protocol") through a
// real cluster, spoken by a cppzmq DEALER: submit and subscribe, sessions,
// cancel, authorisation, hostile frames and many requests in flight on one
// socket; then a broker with tight client limits (docs/protocol.md,
// "Connections"): connection floods, silent connections, subscription quotas.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <thread>
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
  // Authenticated first: a connection that has sent a valid token may send
  // bad frames (each answered); one that has not is closed after a few (see
  // NativeLimitsTest.BadFramesBeforeAnyValidRequestCloseTheConnection).
  cl.Send(client::Get{99, TestCluster::kToken, "ex_nope"});
  EXPECT_EQ(As<client::Error>(cl.Next(99)).code, "NOT_FOUND");
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
  // A frame over twice the body limit: ZeroMQ drops that connection; the
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

// Requests that need Redis run off the client loop: while Redis stalls,
// they wait (and end UNAVAILABLE) in parallel, and what needs no Redis (a
// wrong token) is answered at once. Served on the loop, the wrong token
// would wait behind the four stalled calls (2 s each).
TEST_F(NativeTest, ARedisStallHoldsOnlyTheRequestsThatNeedIt) {
  NativeClient a = Client(), b = Client();
  c().redis().Signal(SIGSTOP);
  struct Resume {
    TestCluster& c;
    ~Resume() { c.redis().Signal(SIGCONT); }
  } resume{c()};
  for (uint64_t i = 0; i < 4; ++i) {
    a.Send(client::Get{300 + i, TestCluster::kToken, "ex_stalled_" + std::to_string(i)});
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the loop has them
  auto t0 = Clock::now();
  b.Send(client::Get{310, "wrong-token-123", "ex_any"});
  EXPECT_EQ(As<client::Error>(b.Next(310, std::chrono::seconds(10))).code, "UNAUTHORIZED");
  const double unauthorized_s = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_LT(unauthorized_s, 1.0) << "a request without Redis waited for the stalled ones";
  t0 = Clock::now();
  b.Send(client::Get{311, TestCluster::kToken, "ex_also_stalled"});
  EXPECT_EQ(As<client::Error>(b.Next(311, std::chrono::seconds(20))).code, "UNAVAILABLE");
  const double stalled_s = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_LT(stalled_s, 5.0) << "a stalled request waited for the other client's";
  for (uint64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(As<client::Error>(a.Next(300 + i, std::chrono::seconds(20))).code, "UNAVAILABLE");
  }
  std::cerr << "during the stall: wrong token answered in " << unauthorized_s
            << " s, a stalled get in " << stalled_s << " s\n";
  c().redis().Signal(SIGCONT);
  // Served again once Redis answers.
  bool served = false;
  for (uint64_t i = 0; i < 40 && !served; ++i) {
    a.Send(SubmitOf(320 + i, {{"language", "shell"}, {"code", "echo back"}}, true));
    auto got = a.UntilEnd(320 + i, std::chrono::seconds(10));
    served = !got.empty() && std::holds_alternative<client::Result>(got.back());
    if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  EXPECT_TRUE(served) << "no job ran after Redis came back";
}

// ---------------------------------------------------------------------------
// A broker with tight client limits: 8 connections per address, 500 ms to
// authenticate, 2 open subscriptions for tenant-a.

// The connection events of one socket, through a ZeroMQ socket monitor.
class SocketEvents {
 public:
  SocketEvents(zmq::context_t& ctx, zmq::socket_t& socket)
      : socket_(socket.handle()), pair_(ctx, zmq::socket_type::pair) {
    static int n = 0;
    const std::string endpoint = "inproc://native-test-monitor-" + std::to_string(++n);
    EXPECT_EQ(zmq_socket_monitor(socket_, endpoint.c_str(),
                                 ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED),
              0);
    pair_.set(zmq::sockopt::linger, 0);
    pair_.set(zmq::sockopt::rcvhwm, 0);
    pair_.connect(endpoint);
  }
  // Stops the monitor before its reader goes (libzmq sends events blocking).
  ~SocketEvents() { zmq_socket_monitor(socket_, nullptr, 0); }
  SocketEvents(const SocketEvents&) = delete;
  SocketEvents& operator=(const SocketEvents&) = delete;

  // Whether `event` happens within `timeout` (other events are skipped).
  bool WaitFor(uint16_t event, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (true) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return false;
      zmq::pollitem_t item{pair_.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, left) == 0) return false;
      zmq::message_t head, address;
      if (!pair_.recv(head, zmq::recv_flags::none)) return false;
      if (head.more()) (void)pair_.recv(address, zmq::recv_flags::none);
      uint16_t got = 0;
      std::memcpy(&got, head.data(), sizeof(got));
      if (got == event) return true;
    }
  }

 private:
  void* socket_;
  zmq::socket_t pair_;
};

// A plain TCP connection from `source` that never says a ZMTP word.
int RawConnect(const std::string& source, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in from{}, to{};
  from.sin_family = to.sin_family = AF_INET;
  inet_pton(AF_INET, source.c_str(), &from.sin_addr);
  inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  to.sin_port = htons(static_cast<uint16_t>(port));
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)), 0) << errno;
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0) << errno;
  return fd;
}

// Whether the peer closes `fd` (EOF or reset) before `deadline`; whatever it
// sends first (the broker's ZMTP greeting) is read and dropped.
bool ClosedByPeer(int fd, Clock::time_point deadline) {
  char buf[256];
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
    if (n < 0 && errno != EINTR && errno != EAGAIN) return true;
  }
}

int PortOf(const std::string& endpoint) {
  return std::stoi(endpoint.substr(endpoint.rfind(':') + 1));
}

class NativeLimitsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = TestCluster::Start({.brokers = 1,
                                   .workers = 1,
                                   .slots = 4,
                                   .tenant_a_fields = ", max_subscriptions: 2",
                                   .broker_clients_fields =
                                       ", max_connections_per_address: 8, auth_timeout_ms: 500"})
                   .release();
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

  // One sample of the broker's /metrics (-1 when absent).
  double Metric(const std::string& series) {
    const std::string text = c().Request("GET", "/metrics").raw;
    auto at = text.find("\n" + series + " ");
    return at == std::string::npos ? -1.0 : std::stod(text.substr(at + series.size() + 2));
  }
  double Closed(const std::string& reason) {
    return Metric("kiln_native_connections_closed_total{reason=\"" + reason + "\"}");
  }

  static TestCluster* cluster_;
  zmq::context_t ctx_{1};
};

TestCluster* NativeLimitsTest::cluster_ = nullptr;

// 40 connections from one address (20 plain TCP sockets that complete no
// handshake, 20 DEALERs that never send a request, reconnecting whenever
// they are dropped): the 32 beyond the address's 8 are closed at once, the
// rest at the auth timeout, while a client elsewhere is served and the
// health endpoint answers throughout.
TEST_F(NativeLimitsTest, ConnectionFloodFromOneAddressLeavesTheBrokerServing) {
  const pid_t pid = c().broker(0).pid();
  const int port = PortOf(c().client_endpoint());
  const double address_limit_before = Closed("address_limit");
  const double auth_timeout_before = Closed("auth_timeout");
  ASSERT_GE(address_limit_before, 0) << "kiln_native_connections_closed_total is exported";

  std::vector<int> raw;
  std::vector<std::unique_ptr<zmq::socket_t>> dealers;
  for (int i = 0; i < 20; ++i) {
    raw.push_back(RawConnect("127.0.0.2", port));
    auto d = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::dealer);
    d->set(zmq::sockopt::linger, 0);
    d->connect("tcp://127.0.0.2:0;127.0.0.1:" + std::to_string(port));
    dealers.push_back(std::move(d));
    if (i % 5 == 0) {
      EXPECT_EQ(c().Request("GET", "/v1/health").status, 200) << i;
    }
  }
  EXPECT_TRUE(WaitFor([&] { return Closed("address_limit") >= address_limit_before + 32; },
                      std::chrono::seconds(15)))
      << "address_limit closes: " << Closed("address_limit") - address_limit_before;
  EXPECT_EQ(c().Request("GET", "/v1/health").status, 200);

  // A client from another address gets its job done meanwhile.
  NativeClient cl = Client();
  cl.Send(client::Submit{1, TestCluster::kToken,
                         json{{"language", "shell"}, {"code", "echo served"}}.dump(), "", true});
  As<client::Accepted>(cl.Next(1));
  auto end = cl.UntilEnd(1);
  ASSERT_FALSE(end.empty());
  EXPECT_EQ(json::parse(As<client::Result>(end.back()).record_json)["stdout"], "served\n");

  // Every plain connection is closed by the broker: over the limit at once,
  // or at the auth timeout.
  const auto deadline = Clock::now() + std::chrono::seconds(15);
  int closed = 0;
  for (int fd : raw) closed += ClosedByPeer(fd, deadline) ? 1 : 0;
  EXPECT_EQ(closed, 20);
  EXPECT_TRUE(WaitFor([&] { return Closed("auth_timeout") > auth_timeout_before; },
                      std::chrono::seconds(5)));
  EXPECT_EQ(c().Request("GET", "/v1/health").status, 200);
  EXPECT_EQ(c().broker(0).pid(), pid);
  EXPECT_TRUE(c().broker(0).running());

  // Once the attackers go, the broker holds no connection of theirs.
  for (int fd : raw) ::close(fd);
  dealers.clear();
  EXPECT_TRUE(
      WaitFor([&] { return Metric("kiln_native_connections") <= 1; }, std::chrono::seconds(15)))
      << "kiln_native_connections " << Metric("kiln_native_connections");
}

// A connection that sends no request with a valid token is dropped after
// auth_timeout_ms; one that has sent one keeps its connection.
TEST_F(NativeLimitsTest, SilentConnectionsAreClosedAtTheAuthTimeout) {
  const double before = Closed("auth_timeout");
  // The talker sends a request with a valid token at once (an unknown id will do).
  NativeClient talker = Client();
  SocketEvents talker_events(ctx_, talker.socket());
  talker.Send(client::Get{1, TestCluster::kToken, "ex_nope"});
  EXPECT_EQ(As<client::Error>(talker.Next(1)).code, "NOT_FOUND");

  zmq::socket_t silent(ctx_, zmq::socket_type::dealer);
  silent.set(zmq::sockopt::linger, 0);
  SocketEvents silent_events(ctx_, silent);
  const auto t0 = Clock::now();
  silent.connect(c().client_endpoint());
  ASSERT_TRUE(silent_events.WaitFor(ZMQ_EVENT_HANDSHAKE_SUCCEEDED, std::chrono::seconds(10)));
  ASSERT_TRUE(silent_events.WaitFor(ZMQ_EVENT_DISCONNECTED, std::chrono::seconds(10)))
      << "the silent connection was never closed";
  const auto after = Clock::now() - t0;
  EXPECT_GE(after, std::chrono::milliseconds(400)) << "closed before its auth timeout";
  EXPECT_TRUE(WaitFor([&] { return Closed("auth_timeout") > before; }, std::chrono::seconds(5)));

  // Three timeouts later the talker is still connected, and served.
  EXPECT_FALSE(talker_events.WaitFor(ZMQ_EVENT_DISCONNECTED, std::chrono::milliseconds(1500)));
  talker.Send(client::Get{2, TestCluster::kToken, "ex_nope"});
  EXPECT_EQ(As<client::Error>(talker.Next(2)).code, "NOT_FOUND");
}

// Before any valid request, a few failed ones (garbage, a wrong token) close
// the connection; each is still answered until then.
TEST_F(NativeLimitsTest, BadFramesBeforeAnyValidRequestCloseTheConnection) {
  const double before = Closed("bad_frames");
  NativeClient cl = Client();
  SocketEvents events(ctx_, cl.socket());  // before anything can close it
  cl.SendRaw("garbage");
  EXPECT_EQ(As<client::Error>(cl.Next(0)).code, "INVALID_REQUEST");
  cl.Send(client::Get{1, "not-a-valid-token", "ex_nope"});
  EXPECT_EQ(As<client::Error>(cl.Next(1)).code, "UNAUTHORIZED");
  for (int i = 0; i < 20; ++i) cl.SendRaw("garbage");
  EXPECT_TRUE(events.WaitFor(ZMQ_EVENT_DISCONNECTED, std::chrono::seconds(10)));
  // Closed for its bad frames, not at its (500 ms) auth timeout.
  EXPECT_TRUE(WaitFor([&] { return Closed("bad_frames") > before; }, std::chrono::seconds(5)));
}

// tenant-a may hold 2 open subscriptions on this broker: a third subscribe,
// or a submit with subscribe, answers RATE_LIMITED and changes nothing;
// tenant-b is not affected; once one ends, tenant-a may subscribe again.
TEST_F(NativeLimitsTest, SubscriptionsPerTenantAreCapped) {
  NativeClient cl = Client();
  const json sleeper = {{"language", "python"}, {"code", "import time\ntime.sleep(30)\n"}};
  cl.Send(client::Submit{1, TestCluster::kToken, sleeper.dump(), "", true});
  cl.Send(client::Submit{2, TestCluster::kToken, sleeper.dump(), "", true});
  const std::string id1 = As<client::Accepted>(cl.Next(1)).id;
  const std::string id2 = As<client::Accepted>(cl.Next(2)).id;
  ASSERT_FALSE(id1.empty());
  ASSERT_FALSE(id2.empty());

  cl.Send(client::Subscribe{3, TestCluster::kToken, id1});
  auto e3 = As<client::Error>(cl.Next(3));
  EXPECT_EQ(e3.code, "RATE_LIMITED") << e3.message;
  EXPECT_TRUE(e3.retryable);
  const std::string submitted =
      R"(kiln_executions_submitted_total{language="python",tenant="tenant-a"})";
  const double submitted_before = Metric(submitted);
  cl.Send(client::Submit{4, TestCluster::kToken, sleeper.dump(), "", true});
  EXPECT_EQ(As<client::Error>(cl.Next(4)).code, "RATE_LIMITED");
  EXPECT_EQ(Metric(submitted), submitted_before) << "the refused submit created a job";
  // Without subscribe, submits are not limited by it.
  cl.Send(client::Submit{5, TestCluster::kToken,
                         json{{"language", "shell"}, {"code", "true"}}.dump(), "", false});
  As<client::Accepted>(cl.Next(5));
  // Another tenant subscribes freely.
  cl.Send(client::Submit{6, TestCluster::kOtherToken,
                         json{{"language", "shell"}, {"code", "echo b"}}.dump(), "", true});
  As<client::Accepted>(cl.Next(6));
  auto b = cl.UntilEnd(6);
  ASSERT_FALSE(b.empty());
  EXPECT_EQ(json::parse(As<client::Result>(b.back()).record_json)["stdout"], "b\n");

  // The first job ends (cancelled): its subscription closes with its result,
  // and tenant-a may subscribe again.
  cl.Send(client::Cancel{7, TestCluster::kToken, id1});
  ASSERT_TRUE(cl.Next(7).has_value());
  auto first = cl.UntilEnd(1, std::chrono::seconds(30));
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(json::parse(As<client::Result>(first.back()).record_json)["status"], "cancelled");
  std::optional<client::Message> again;
  EXPECT_TRUE(WaitFor(
      [&] {
        cl.Send(client::Subscribe{8, TestCluster::kToken, id1});
        again = cl.Next(8);
        return again && std::holds_alternative<client::Result>(*again);
      },
      std::chrono::seconds(10)))
      << Describe(again);
  cl.Send(client::Cancel{9, TestCluster::kToken, id2});
  ASSERT_TRUE(cl.Next(9).has_value());
  auto second = cl.UntilEnd(2, std::chrono::seconds(30));
  ASSERT_FALSE(second.empty());
  EXPECT_EQ(json::parse(As<client::Result>(second.back()).record_json)["status"], "cancelled");
}

}  // namespace
}  // namespace kiln::testing
