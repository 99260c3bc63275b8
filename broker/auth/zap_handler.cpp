#include "broker/auth/zap_handler.hpp"

#include <chrono>
#include <string>
#include <vector>

#include "broker/metrics/broker_metrics.hpp"
#include "common/log/logging.hpp"

namespace kiln::broker {
namespace {

const common::SubsystemLog kLog("scheduler");
constexpr int kMaxRequestsPerCall = 256;
constexpr size_t kMaxFrames = 16;  // a request has 7; more is not a ZAP request
constexpr auto kUnknownKeyRefresh = std::chrono::milliseconds(100);

// What libzmq's ZAP client sends: version, request id, domain, address,
// routing id, mechanism, then the mechanism's credentials.
std::vector<std::string> ReadRequest(zmq::socket_t& s, bool* any) {
  std::vector<std::string> frames;
  *any = false;
  zmq::message_t m;
  if (!s.recv(m, zmq::recv_flags::dontwait)) return frames;
  *any = true;
  frames.push_back(m.to_string());
  while (m.more()) {
    if (!s.recv(m, zmq::recv_flags::none)) break;
    if (frames.size() < kMaxFrames) frames.push_back(m.to_string());
  }
  return frames;
}

}  // namespace

common::StatusOr<std::unique_ptr<ZapHandler>> ZapHandler::Create(zmq::context_t* ctx,
                                                                 WorkerKeyring* keyring,
                                                                 BrokerMetrics* metrics) {
  try {
    zmq::socket_t s(*ctx, zmq::socket_type::rep);
    s.set(zmq::sockopt::linger, 0);
    s.bind("inproc://zeromq.zap.01");
    return std::unique_ptr<ZapHandler>(new ZapHandler(std::move(s), keyring, metrics));
  } catch (const zmq::error_t& e) {
    return common::Internal(std::string("cannot start the worker key check (ZAP): ") + e.what());
  }
}

void ZapHandler::Serve() {
  for (int i = 0; i < kMaxRequestsPerCall; ++i) {
    bool any = false;
    std::vector<std::string> f;
    try {
      f = ReadRequest(socket_, &any);
    } catch (const zmq::error_t& e) {
      kLog.Error({}, "reading an authentication request failed: {}", e.what());
      return;
    }
    if (!any) return;
    if (f.size() < 6) {
      ++refused_;
      if (metrics_) metrics_->WorkerRefused("handshake");
      Answer(f.size() > 1 ? f[1] : "", false, "malformed ZAP request", "");
      continue;
    }
    const std::string& request_id = f[1];
    const std::string& domain = f[2];
    const std::string& address = f[3];
    const std::string& mechanism = f[5];
    std::string why;
    std::string key_z85;
    if (f[0] != "1.0") {
      why = "unsupported ZAP version";
    } else if (domain == kClientZapDomain && mechanism == "CURVE") {
      Answer(request_id, true, "OK", "");  // a native client: its token decides
      continue;
    } else if (domain != kWorkerZapDomain || mechanism != "CURVE" || f.size() != 7 ||
               f[6].size() != 32) {
      why = "the worker endpoint takes CURVE connections only";
    } else {
      char z85[41] = {};
      zmq_z85_encode(z85, reinterpret_cast<const uint8_t*>(f[6].data()), 32);
      key_z85 = z85;
      if (!keyring_->WorkerOf(key_z85)) {
        // A key added a moment ago counts at once, not at the next refresh;
        // at most every kUnknownKeyRefresh, so a flood of unknown keys does
        // not turn into a flood of directory scans.
        const auto now = std::chrono::steady_clock::now();
        if (now >= next_refresh_) {
          next_refresh_ = now + kUnknownKeyRefresh;
          keyring_->Refresh();
        }
        if (!keyring_->WorkerOf(key_z85)) why = "unknown worker key";
      }
    }
    if (why.empty()) {
      Answer(request_id, true, "OK", key_z85);
      continue;
    }
    ++refused_;
    if (metrics_) metrics_->WorkerRefused(key_z85.empty() ? "handshake" : "unknown_key");
    static common::LogLimiter limit(10, std::chrono::seconds(10));
    kLog.Warn(limit, {}, "refused a worker connection from {}: {}{}", address, why,
              key_z85.empty() ? "" : " " + key_z85);
    Answer(request_id, false, why, "");
  }
}

void ZapHandler::Answer(const std::string& request_id, bool ok, const std::string& text,
                        const std::string& user_id) {
  try {
    socket_.send(zmq::buffer(std::string_view("1.0")), zmq::send_flags::sndmore);
    socket_.send(zmq::buffer(request_id), zmq::send_flags::sndmore);
    socket_.send(zmq::buffer(std::string_view(ok ? "200" : "400")), zmq::send_flags::sndmore);
    socket_.send(zmq::buffer(text), zmq::send_flags::sndmore);
    socket_.send(zmq::buffer(user_id), zmq::send_flags::sndmore);
    socket_.send(zmq::message_t(), zmq::send_flags::none);  // no metadata
  } catch (const zmq::error_t& e) {
    kLog.Error({}, "answering an authentication request failed: {}", e.what());
  }
}

}  // namespace kiln::broker
