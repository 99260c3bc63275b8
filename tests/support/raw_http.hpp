// RawSocket: HTTP/1.1 over a plain TCP socket, for tests that play a hostile
// client and must control every byte — a head trickled byte by byte, a bad
// Content-Length, a body abandoned half way, a stream never read — and where
// it comes from (a 127.0.0.x source address, a small receive buffer).
//
//   RawSocket s = RawSocket::Connect(port, {.source = "127.0.0.2"});
//   s.SendAll(RawRequest("GET", "/v1/health"));
//   RawResponse r = s.ReadResponse(Clock::now() + std::chrono::seconds(1));
//
// Every wait takes a deadline; nothing blocks past it. The socket is
// non-blocking and closed by the destructor. One thread per RawSocket.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::testing {

using RawClock = std::chrono::steady_clock;

struct RawOptions {
  std::string source;  // bind to this local address first ("" = any)
  int rcvbuf = 0;      // SO_RCVBUF set before connecting (0 = the default)
};

struct RawResponse {
  int status = 0;  // 0: no complete head before the deadline or the close
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // de-chunked
  bool complete = false;                       // the whole body arrived
  nlohmann::json json() const { return nlohmann::json::parse(body, nullptr, false); }
  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
  // "429 RATE_LIMITED: message" for failure messages.
  std::string Describe() const;
};

// Text of a request. `body` is sent with a Content-Length unless `headers`
// name a Transfer-Encoding or Content-Length of their own; a Content-Type is
// only sent when `headers` hold one.
std::string RawRequest(const std::string& method, const std::string& target,
                       const std::string& token = "", const std::string& body = "",
                       const std::vector<std::pair<std::string, std::string>>& headers = {});

// Incremental decoder of a chunked body.
class ChunkedDecoder {
 public:
  // Consumes what it can of `in` (removing it) and appends data to `out`.
  // False on malformed input.
  bool Feed(std::string* in, std::string* out);
  bool done() const { return state_ == State::kDone; }

 private:
  enum class State { kSize, kData, kDataEnd, kTrailer, kDone };
  State state_ = State::kSize;
  uint64_t left_ = 0;
};

class RawSocket {
 public:
  // A connected socket, or one with ok() false (errno_ says why).
  static RawSocket Connect(int port, const RawOptions& options = {});
  RawSocket() = default;
  RawSocket(RawSocket&& o) noexcept;
  RawSocket& operator=(RawSocket&& o) noexcept;
  RawSocket(const RawSocket&) = delete;
  RawSocket& operator=(const RawSocket&) = delete;
  ~RawSocket() { Close(); }

  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  int error() const { return errno_; }
  void Close();

  // Sends all of `data` before `deadline`; false on an error or the deadline.
  bool SendAll(std::string_view data,
               RawClock::time_point deadline = RawClock::now() + std::chrono::seconds(5));
  // Sends what fits now: bytes sent, or -1 on an error (EAGAIN is 0).
  long SendSome(std::string_view data);
  // Reads what arrives within `wait` into the buffer: bytes read, 0 on
  // nothing, -1 once the peer closed (EOF or reset).
  long Pump(std::chrono::milliseconds wait);
  // Whether data (or a close) is ready to read now.
  bool Readable(std::chrono::milliseconds wait = std::chrono::milliseconds(0)) const;

  // One whole response (the body by Content-Length, chunked, or until close).
  RawResponse ReadResponse(RawClock::time_point deadline);
  // Only the head; the body's bytes stay in buffer() for ReadBody or ReadChunked.
  RawResponse ReadHead(RawClock::time_point deadline);
  // The body of a response whose head ReadHead returned.
  void ReadBody(RawResponse* response, RawClock::time_point deadline);
  // The next decoded piece of a chunked body (empty when nothing came
  // before the deadline); `decoder` keeps the state between calls.
  std::string ReadChunked(ChunkedDecoder* decoder, RawClock::time_point deadline);
  // Whether the peer closes the connection (EOF or reset) before
  // `deadline`; whatever it sends first is kept in buffer().
  bool WaitClosed(RawClock::time_point deadline);
  bool peer_closed() const { return peer_closed_; }
  std::string& buffer() { return in_; }

 private:
  explicit RawSocket(int fd) : fd_(fd) {}
  // Parses a head at the front of in_ into `r` (and removes it).
  bool TakeHead(RawResponse* r);

  int fd_ = -1;
  int errno_ = 0;
  bool peer_closed_ = false;
  std::string in_;
};

// One request on a fresh connection, answered before `timeout`.
RawResponse RawExchange(int port, const std::string& request, std::chrono::milliseconds timeout,
                        const RawOptions& options = {});

}  // namespace kiln::testing
