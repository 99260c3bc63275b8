#include "tests/bench/native_submitter.hpp"

#include <optional>
#include <utility>
#include <variant>

#include "common/clock.hpp"
#include "common/protocol/client_codec.hpp"

namespace kiln::bench {
namespace {

namespace client = common::protocol::client;
using common::SteadyClock;

double MsBetween(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

NativeSubmitter::NativeSubmitter(zmq::context_t& ctx, const std::string& endpoint,
                                 std::string token, int timeout_s)
    : socket_(ctx, zmq::socket_type::dealer),
      token_(std::move(token)),
      timeout_(std::chrono::seconds(timeout_s)) {
  socket_.set(zmq::sockopt::linger, 0);
  socket_.set(zmq::sockopt::sndhwm, 0);
  socket_.set(zmq::sockopt::rcvhwm, 0);
  socket_.connect(endpoint);
}

Sample NativeSubmitter::Submit(const std::string& request_json) {
  Sample s;
  const uint64_t id = next_request_id_++;
  const std::string frame = client::Encode(client::Submit{
      .request_id = id, .token = token_, .request_json = request_json, .subscribe = true});
  const SteadyClock::time_point start = SteadyClock::now();
  const SteadyClock::time_point deadline = start + timeout_;
  std::optional<double> accepted_ms;
  auto fail = [&s, start](std::string outcome, std::string body) {
    s.latency_ms = MsBetween(start, SteadyClock::now());
    s.outcome = std::move(outcome);
    s.body = std::move(body);
    return s;
  };
  try {
    socket_.send(zmq::buffer(frame), zmq::send_flags::none);
    while (true) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      if (left.count() <= 0 || zmq::poll(&item, 1, left) == 0) {
        return fail("transport/timeout", "no result within the timeout");
      }
      zmq::message_t msg;
      if (!socket_.recv(msg, zmq::recv_flags::dontwait)) continue;
      const SteadyClock::time_point received = SteadyClock::now();
      auto m = client::Decode(msg.to_string_view());
      if (!m.ok()) return fail("transport/undecodable", m.status().ToString());
      if (client::RequestIdOf(*m) != id) continue;
      if (const auto* e = std::get_if<client::Error>(&*m)) {
        return fail("native/" + e->code, e->message);
      }
      const auto* r = std::get_if<client::Result>(&*m);
      if (std::holds_alternative<client::Accepted>(*m)) {
        accepted_ms = MsBetween(start, received);
      }
      if (r == nullptr) continue;  // accepted, output
      auto record = nlohmann::json::parse(r->record_json, nullptr, /*allow_exceptions=*/false);
      if (!record.is_object()) return fail("native/bad_record", r->record_json);
      s = SampleFromRecord(record);
      s.latency_ms = MsBetween(start, received);
      s.accepted_ms = accepted_ms;
      if (!s.ok) s.body = r->record_json;
      return s;
    }
  } catch (const zmq::error_t& e) {
    return fail("transport/zmq", e.what());
  }
}

}  // namespace kiln::bench
