// ZapHandler answering real ZAP requests over inproc, as libzmq would send
// them for CURVE handshakes, against a WorkerKeyring on a temporary directory.
#include "broker/auth/zap_handler.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "common/curve/curve_keys.hpp"

namespace kiln::broker {
namespace {

using namespace std::chrono_literals;

struct Reply {
  std::string status;  // "200" or "400"
  std::string text;
  std::string user_id;
};

class ZapHandlerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kiln-zap-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    keyring_ = std::make_unique<WorkerKeyring>(dir_);
    auto zap = ZapHandler::Create(&ctx_, keyring_.get(), nullptr);
    ASSERT_TRUE(zap.ok()) << zap.status().message();
    zap_ = std::move(*zap);
    client_ = zmq::socket_t(ctx_, zmq::socket_type::req);
    client_.set(zmq::sockopt::linger, 0);
    client_.set(zmq::sockopt::rcvtimeo, 5000);
    client_.connect("inproc://zeromq.zap.01");
  }
  void TearDown() override {
    client_.close();
    zap_.reset();
    std::filesystem::remove_all(dir_);
  }

  common::CurveKeyPair AddKey(const std::string& name) {
    auto kp = common::GenerateCurveKeyPair();
    EXPECT_TRUE(kp.ok());
    EXPECT_TRUE(common::WriteCurveKeyFiles(dir_, name, *kp).ok());
    std::filesystem::remove(dir_ + "/" + name + ".key");  // a broker holds public keys only
    return *kp;
  }

  // Sends one request and lets the handler answer it.
  Reply Ask(const std::vector<std::string>& frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      client_.send(zmq::buffer(frames[i]),
                   i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
    zmq::pollitem_t item{zap_->socket().handle(), 0, ZMQ_POLLIN, 0};
    EXPECT_EQ(zmq::poll(&item, 1, std::chrono::milliseconds(5000)), 1);
    zap_->Serve();
    std::vector<std::string> got;
    zmq::message_t m;
    do {
      if (!client_.recv(m)) break;
      got.push_back(m.to_string());
    } while (m.more());
    EXPECT_EQ(got.size(), 6u) << "a ZAP reply has six frames";
    if (got.size() < 5) return {};
    EXPECT_EQ(got[0], "1.0");
    return {got[2], got[3], got[4]};
  }

  Reply AskCurve(const std::string& domain, const std::string& public_z85) {
    std::string key(32, '\0');
    EXPECT_NE(zmq_z85_decode(reinterpret_cast<uint8_t*>(key.data()), public_z85.c_str()), nullptr);
    return Ask({"1.0", "7", domain, "10.0.0.9", "", "CURVE", key});
  }

  zmq::context_t ctx_;
  std::string dir_;
  std::unique_ptr<WorkerKeyring> keyring_;
  std::unique_ptr<ZapHandler> zap_;
  zmq::socket_t client_;
};

TEST_F(ZapHandlerTest, AcceptedKeyGetsItsKeyAsUserId) {
  auto w1 = AddKey("w1");
  keyring_->Refresh();
  Reply r = AskCurve(kWorkerZapDomain, w1.public_z85);
  EXPECT_EQ(r.status, "200");
  EXPECT_EQ(r.user_id, w1.public_z85);
  EXPECT_EQ(zap_->refused(), 0u);
}

TEST_F(ZapHandlerTest, RefusesUnknownKeysOtherMechanismsAndMalformedRequests) {
  auto stranger = common::GenerateCurveKeyPair();
  ASSERT_TRUE(stranger.ok());
  Reply r = AskCurve(kWorkerZapDomain, stranger->public_z85);
  EXPECT_EQ(r.status, "400");
  EXPECT_EQ(r.text, "unknown worker key");
  EXPECT_EQ(r.user_id, "");

  r = Ask({"1.0", "8", kWorkerZapDomain, "10.0.0.9", "", "NULL"});
  EXPECT_EQ(r.status, "400");
  EXPECT_EQ(r.text, "the worker endpoint takes CURVE connections only");
  r = Ask({"1.0", "9", kWorkerZapDomain, "10.0.0.9", "", "PLAIN", "user", "password"});
  EXPECT_EQ(r.status, "400");
  r = Ask({"1.0", "10", kWorkerZapDomain, "10.0.0.9", "", "CURVE", "short"});
  EXPECT_EQ(r.status, "400");
  r = Ask({"2.0", "11", kWorkerZapDomain, "10.0.0.9", "", "CURVE", std::string(32, 'k')});
  EXPECT_EQ(r.text, "unsupported ZAP version");
  r = Ask({"1.0", "12"});
  EXPECT_EQ(r.text, "malformed ZAP request");
  r = Ask({"1.0", "13", "some-other-domain", "10.0.0.9", "", "CURVE", std::string(32, 'k')});
  EXPECT_EQ(r.status, "400");
  EXPECT_EQ(zap_->refused(), 7u);
}

TEST_F(ZapHandlerTest, NativeClientDomainTakesAnyKey) {
  auto client = common::GenerateCurveKeyPair();
  ASSERT_TRUE(client.ok());
  Reply r = AskCurve(kClientZapDomain, client->public_z85);
  EXPECT_EQ(r.status, "200");
  EXPECT_EQ(r.user_id, "");  // tokens, not keys, say who a client is
}

// An unknown key makes the handler re-read the directory (a key added a
// moment ago counts without waiting for the periodic refresh), but a flood
// of unknown keys must not become a flood of directory scans.
TEST_F(ZapHandlerTest, UnknownKeyFloodReadsTheDirectoryAtMostEvery100Ms) {
  for (int i = 0; i < 20; ++i) AddKey("w" + std::to_string(i));
  keyring_->Refresh();
  const uint64_t before = keyring_->scans();
  const auto start = std::chrono::steady_clock::now();
  constexpr int kFlood = 500;
  for (int i = 0; i < kFlood; ++i) {
    auto kp = common::GenerateCurveKeyPair();
    ASSERT_TRUE(kp.ok());
    ASSERT_EQ(AskCurve(kWorkerZapDomain, kp->public_z85).status, "400");
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  const uint64_t scans = keyring_->scans() - before;
  EXPECT_GE(scans, 1u);
  EXPECT_LE(scans, 2 + static_cast<uint64_t>(elapsed / 100ms))
      << kFlood << " unknown keys in "
      << std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count() << " ms";

  // A key added now is accepted on its first handshake once the window has
  // passed, without anyone calling Refresh.
  auto late = AddKey("late");
  std::this_thread::sleep_for(150ms);
  Reply r = AskCurve(kWorkerZapDomain, late.public_z85);
  EXPECT_EQ(r.status, "200");
  EXPECT_EQ(r.user_id, late.public_z85);
}

}  // namespace
}  // namespace kiln::broker
