// libFuzzer target for the HTTP requests the broker reads: Boost.Beast's
// request_parser<string_body> driven as broker/http/http_server.cpp drives
// it (header_limit and body_limit from the config, one flat_buffer, put()
// until the message is done, put_eof when the peer closes), then what the
// broker does with a parsed request that is ours to get right: the route
// table of broker/api/http_api.cpp and the Last-Event-ID header.
//
//   tests/fuzz/fuzz.sh build-fuzz 600 http_fuzz   # build, then fuzz for 10 minutes
//
// The input is the bytes a client sends. Each is read twice with the
// broker's limits (16 KiB head, 16 MiB body) and twice with small ones
// (256-byte head, 1 KiB body, so short inputs reach them): in one read, and
// in two reads split at a point the input chooses. Checked:
//  - no crash, no Beast assertion (the fuzz build keeps asserts), progress;
//  - the head yielded and the bytes held while waiting for more stay within
//    header_limit; a yielded body within body_limit and its Content-Length;
//  - where the request is cut into reads does not change what it yields;
//  - a route found fills its pattern back to the path; a 405's Allow lists
//    exactly the methods the path has; a 404 path has no method;
//  - Last-Event-ID: accepted ids are what docs/api.md says, others a
//    described INVALID_REQUEST; every Redis stream id is accepted.
//
// Found by this target and fixed in the broker (inputs in
// tests/fuzz/regressions/http_fuzz/): Beast applies header_limit to a window
// that moves with the reads (the broker checks the whole head in OnHeader);
// a chunk-size line or the trailers were buffered without bound (the
// broker's read buffer holds at most a head); a Last-Event-ID above 2^64
// passed and broke the follower's shared XREAD (ParseLastEventId refuses it).
#include <algorithm>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "broker/api/sse_events.hpp"
#include "broker/config.hpp"
#include "broker/http/http_exchange.hpp"
#include "broker/http/route_table.hpp"
#include "common/status.hpp"
#include "tests/fuzz/fuzz_targets.hpp"

namespace {

namespace beast = boost::beast;
namespace http = boost::beast::http;
using kiln::broker::Access;
using kiln::broker::RouteTable;
using kiln::common::Code;

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "http_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

void Check(bool ok, const char* what, const std::string& detail = "") {
  if (!ok) Fail(what, detail);
}

struct Limits {
  const char* name;
  uint32_t header;
  uint64_t body;
};

// What one request yields, read as the broker reads it.
struct Outcome {
  beast::error_code ec;  // what ReadFailed would see; none when done
  bool header_done = false;
  bool done = false;
  size_t head_bytes = 0;  // consumed when the head was complete
  std::string method;
  std::string target;
  std::vector<std::pair<std::string, std::string>> fields;
  std::optional<uint64_t> content_length;
  bool chunked = false;
  bool keep_alive = false;
  std::string body;
  // Most bytes buffered and not consumed while the parser waited for more,
  // before and after the head was complete: what a client makes the broker hold.
  size_t held_in_head = 0;
  size_t held_in_body = 0;
};

// Whether two readings of one input agree: the same request, or both a
// refusal. Which refusal may differ for a malformed head: Beast parses a
// head as soon as bytes arrive, but once it has had to wait it first looks
// for the head's end, so one reading may meet a bad byte (400) where the
// other meets the limit (431) or the client's close, or (a request line cut
// inside a short version) misses the end and waits for the header deadline.
bool SameOutcome(const Outcome& a, const Outcome& b) {
  if (a.done != b.done) return false;
  if (!a.done) return true;
  return a.head_bytes == b.head_bytes && a.method == b.method && a.target == b.target &&
         a.fields == b.fields && a.content_length == b.content_length && a.chunked == b.chunked &&
         a.keep_alive == b.keep_alive && a.body == b.body;
}

std::string Describe(const Outcome& o) {
  return "ec=" + o.ec.message() + " header_done=" + std::to_string(o.header_done) +
         " done=" + std::to_string(o.done) + " head_bytes=" + std::to_string(o.head_bytes) +
         " body=" + std::to_string(o.body.size());
}

// The broker's Connection::ReadHeader + ReadBody: one parser, one
// flat_buffer of at most a head's size (as the broker's), each socket read
// appending what fits (here: the two pieces, as far as they fit).
Outcome Read(std::string_view input, size_t split, const Limits& limits) {
  http::request_parser<http::string_body> parser;
  parser.header_limit(limits.header);
  parser.body_limit(limits.body);
  beast::flat_buffer buffer(limits.header);
  std::string_view pieces[] = {input.substr(0, split), input.substr(split)};
  size_t next = 0;
  bool overflow = false;
  auto receive = [&]() {
    while (next < 2) {
      std::string_view& piece = pieces[next];
      if (piece.empty()) {
        ++next;
        continue;
      }
      const size_t room = buffer.max_size() - buffer.size();
      if (room == 0) {
        overflow = true;  // Beast's read fails with buffer_overflow
        return false;
      }
      const size_t n = std::min(room, piece.size());
      auto space = buffer.prepare(n);
      std::memcpy(space.data(), piece.data(), n);
      buffer.commit(n);
      piece.remove_prefix(n);
      return true;
    }
    return false;  // the client closed
  };

  Outcome out;
  size_t consumed = 0;
  bool want_more = true;
  // Every round receives a piece or consumes a byte, or the parser is stuck.
  for (size_t round = 0; !parser.is_done(); ++round) {
    if (round > input.size() + 4) Fail("the parser makes no progress", Describe(out));
    if (want_more && !receive()) {
      if (overflow) {
        out.ec = http::error::buffer_overflow;
      } else if (parser.got_some()) {
        parser.put_eof(out.ec);
      } else {
        out.ec = http::error::end_of_stream;
      }
      break;
    }
    const size_t used = parser.put(buffer.data(), out.ec);
    Check(used <= buffer.size(), "put() consumed more than it was given");
    buffer.consume(used);
    consumed += used;
    if (parser.is_header_done() && !out.header_done) {
      out.header_done = true;
      out.head_bytes = consumed;
      // Connection::OnHeader refuses a head above the limit as a whole.
      if (consumed > limits.header) {
        out.header_done = false;
        out.ec = http::error::header_limit;
        break;
      }
    }
    if (out.ec == http::error::need_more) {
      out.ec = {};
      size_t& held = out.header_done ? out.held_in_body : out.held_in_head;
      held = std::max(held, buffer.size());
      want_more = true;
      continue;
    }
    if (out.ec) break;
    want_more = buffer.size() == 0;
  }
  out.done = parser.is_done() && !out.ec;
  if (out.header_done) {
    const auto& req = parser.get();
    out.method = std::string(req.method_string());
    out.target = std::string(req.target());
    for (const auto& f : req) out.fields.emplace_back(f.name_string(), f.value());
    if (auto n = parser.content_length()) out.content_length = *n;
    out.chunked = parser.chunked();
    out.keep_alive = parser.keep_alive();
  }
  if (out.done) out.body = parser.get().body();
  return out;
}

void CheckLimits(const Outcome& o, const Limits& l) {
  const std::string where = std::string(l.name) + " limits: " + Describe(o);
  const size_t head_cap = l.header;
  if (o.header_done)
    Check(o.head_bytes <= head_cap, "a head above header_limit was accepted", where);
  Check(o.held_in_head <= head_cap, "more than header_limit held while reading a head", where);
  Check(o.held_in_body <= l.header, "more than header_limit held in a chunked body", where);
  if (o.done) {
    Check(o.body.size() <= l.body, "a body above body_limit was accepted", where);
    if (o.content_length) {
      Check(o.body.size() == *o.content_length, "body size differs from Content-Length", where);
    }
    Check(o.content_length || o.chunked || o.body.empty(), "a body without framing", where);
  }
}

// Input bytes choose the split so the fuzzer explores every cut: a cheap hash.
size_t SplitPoint(std::string_view input) {
  uint32_t h = 2166136261u;
  for (unsigned char c : input) h = (h ^ c) * 16777619u;
  return input.empty() ? 0 : h % (input.size() + 1);
}

const RouteTable& BrokerRoutes() {
  // The table of HttpApi's constructor (broker/api/http_api.cpp), handlers left out.
  static const RouteTable routes({
      {"POST", "/v1/executions", "submit", Access::kToken, true},
      {"POST", "/v1/executions/batch", "submit_batch", Access::kToken, true},
      {"GET", "/v1/executions", "list", Access::kToken, true},
      {"GET", "/v1/executions/{id}", "get", Access::kToken, true},
      {"GET", "/v1/executions/{id}/events", "events", Access::kToken, true},
      {"POST", "/v1/executions/{id}/cancel", "cancel", Access::kToken, true},
      {"POST", "/v1/executions/{id}/tool-results", "tool_result", Access::kToken, true},
      {"POST", "/v1/executions/{id}/approve", "approval", Access::kAdmin, true},
      {"POST", "/v1/executions/{id}/deny", "approval", Access::kAdmin, true},
      {"GET", "/v1/approvals", "approvals", Access::kAdmin, true},
      {"GET", "/v1/audit", "audit", Access::kAdmin, true},
      {"GET", "/v1/audit/verify", "audit", Access::kAdmin, true},
      {"GET", "/v1/sessions", "sessions", Access::kToken, true},
      {"DELETE", "/v1/sessions/{id}", "session_delete", Access::kToken, true},
      {"GET", "/v1/capabilities", "capabilities", Access::kToken, false},
      {"GET", "/v1/runtimes", "runtimes", Access::kToken, false},
      {"GET", "/v1/workers", "workers", Access::kAdmin, false},
      {"GET", "/v1/usage", "usage", Access::kAdmin, true},
      {"GET", "/v1/health", "health", Access::kPublic, false},
      {"GET", "/metrics", "metrics", Access::kPublic, false},
  });
  return routes;
}

// The pattern with its parameters filled in, in order.
std::string Fill(const std::string& pattern, const std::vector<std::string>& params) {
  std::string out;
  size_t p = 0;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '{') {
      out += pattern[i];
      continue;
    }
    Check(p < params.size(), "fewer parameters than the pattern has", pattern);
    out += params[p++];
    i = pattern.find('}', i);
  }
  Check(p == params.size(), "more parameters than the pattern has", pattern);
  return out;
}

void CheckRoute(std::string_view method, std::string_view path) {
  const RouteTable& table = BrokerRoutes();
  const auto& routes = table.routes();
  const RouteTable::Match m = table.Find(method, path);
  const std::string req = std::string(method) + " " + std::string(path);
  using Kind = RouteTable::Match::Kind;
  switch (m.kind) {
    case Kind::kFound: {
      Check(m.index < routes.size() && routes[m.index].method == method, "found the wrong method",
            req);
      for (const auto& p : m.params) {
        Check(!p.empty() && p.find('/') == std::string::npos, "a parameter is not one segment",
              req);
      }
      Check(Fill(routes[m.index].pattern, m.params) == path, "the route does not fill back", req);
      Check(m.allow.empty(), "Allow on a found route", req);
      break;
    }
    case Kind::kMethodNotAllowed: {
      Check(m.index < routes.size() && !m.allow.empty(), "405 without Allow", req);
      // Each allowed method finds the path, and no other method does.
      std::vector<std::string> allowed;
      for (size_t i = 0; i <= m.allow.size();) {
        const size_t comma = std::min(m.allow.find(", ", i), m.allow.size());
        allowed.push_back(m.allow.substr(i, comma - i));
        i = comma + 2;
      }
      for (const auto& r : routes) {
        const bool listed = std::count(allowed.begin(), allowed.end(), r.method) == 1;
        const RouteTable::Match other = table.Find(r.method, path);
        Check(listed == (other.kind == Kind::kFound), "Allow disagrees with the table",
              req + " allow=" + m.allow + " method=" + r.method);
        Check(r.method != method || !listed, "Allow lists the refused method", req);
      }
      break;
    }
    case Kind::kNotFound:
      for (const auto& r : routes) {
        Check(table.Find(r.method, path).kind == Kind::kNotFound,
              "a 404 path is found under another method", req + " / " + r.method);
      }
      Check(table.NameOf(method, path) == "other", "a 404 path has a route name", req);
      return;
  }
  Check(table.NameOf(method, path) == routes[m.index].name, "NameOf disagrees with Find", req);
}

// "<ms>-<seq>" as ParseLastEventId documents it: 1-20 digits each.
bool IsEntryId(std::string_view s) {
  const size_t dash = s.find('-');
  if (dash == std::string_view::npos) return false;
  auto digits = [](std::string_view d) {
    return !d.empty() && d.size() <= 20 &&
           std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  return digits(s.substr(0, dash)) && digits(s.substr(dash + 1));
}

// An id Redis takes in XREAD: both numbers fit in 64 bits.
bool IsStreamId(std::string_view s) {
  if (!IsEntryId(s)) return false;
  const size_t dash = s.find('-');
  uint64_t v = 0;
  for (std::string_view d : {s.substr(0, dash), s.substr(dash + 1)}) {
    auto [end, ec] = std::from_chars(d.data(), d.data() + d.size(), v);
    if (ec != std::errc() || end != d.data() + d.size()) return false;
  }
  return true;
}

void CheckLastEventId(std::string_view header) {
  using Kind = kiln::broker::LastEventId::Kind;
  const auto last = kiln::broker::ParseLastEventId(header);
  const std::string shown(header.substr(0, 60));
  if (!last.ok()) {
    Check(last.status().code() == Code::kInvalidRequest && !last.status().message().empty(),
          "Last-Event-ID refusal is not a described INVALID_REQUEST", last.status().ToString());
    Check(!header.empty() && header != "start" && header != "end" && !IsStreamId(header),
          "a valid Last-Event-ID was refused", shown);
    return;
  }
  switch (last->kind) {
    case Kind::kNone:
      Check(header.empty(), "Last-Event-ID taken as none", shown);
      break;
    case Kind::kStart:
      Check(header == "start", "Last-Event-ID taken as start", shown);
      break;
    case Kind::kEnd:
      Check(header == "end", "Last-Event-ID taken as end", shown);
      break;
    case Kind::kEntry:
      Check(IsEntryId(header) && last->entry == header && header.size() <= 41,
            "Last-Event-ID entry is not <ms>-<seq>", shown);
      // The entry becomes the cursor of the output follower's one XREAD for
      // every stream: an id Redis refuses would fail them all.
      Check(IsStreamId(header), "Last-Event-ID entry is not a stream id", shown);
      break;
  }
}

// What the broker looks at in a request it dispatches (HttpApi::Handle, Events).
void CheckDispatch(const Outcome& o) {
  const std::string path = o.target.substr(0, o.target.find('?'));
  // The broker's own split of the target: the path as sent, a query that
  // decodes to no more bytes than it had.
  std::string parsed_path;
  std::map<std::string, std::string> query;
  kiln::broker::ParseTarget(o.target, &parsed_path, &query);
  Check(parsed_path == path, "ParseTarget's path differs from the target's", o.target);
  size_t decoded = 0;
  for (const auto& [k, v] : query) decoded += k.size() + v.size();
  Check(decoded <= o.target.size(), "a query decoded to more bytes than it had", o.target);
  CheckRoute(o.method, path);
  for (const auto& [name, value] : o.fields) {
    if (beast::iequals(name, "last-event-id")) CheckLastEventId(value);
  }
}

}  // namespace

int kiln::fuzz::HttpOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  static const kiln::broker::HttpConfig broker_http;
  const Limits limit_sets[] = {
      {"broker", broker_http.max_header_bytes, broker_http.max_body_bytes},
      {"small", 256, 1024},
  };
  const size_t split = SplitPoint(input);
  for (const Limits& limits : limit_sets) {
    const Outcome whole = Read(input, input.size(), limits);
    const Outcome cut = Read(input, split, limits);
    CheckLimits(whole, limits);
    CheckLimits(cut, limits);
    Check(SameOutcome(whole, cut), "splitting the request changed what it yields",
          std::string(limits.name) + " limits, split at " + std::to_string(split) + ": whole " +
              Describe(whole) + " / cut " + Describe(cut));
    if (whole.done) CheckDispatch(whole);
  }
  CheckLastEventId(input);
  return 0;
}

KILN_LIBFUZZER_ENTRY(kiln::fuzz::HttpOneInput)
