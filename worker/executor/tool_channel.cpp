#include "worker/executor/tool_channel.hpp"

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <nlohmann/json.hpp>

#include "common/json/bounded_json.hpp"

namespace kiln::worker {

namespace protocol = common::protocol;

namespace {

// Ids are integers a double holds exactly (JavaScript's numbers).
constexpr uint64_t kMaxId = uint64_t{1} << 53;

bool KnownErrorType(std::string_view t) {
  return t == "ToolError" || t == "ToolRefused" || t == "ToolUnavailable" || t == "ToolTimeout";
}

}  // namespace

ToolMailbox::ToolMailbox() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

void ToolMailbox::Post(protocol::ToolResult result) {
  {
    std::lock_guard lock(mu_);
    results_.push_back(std::move(result));
  }
  uint64_t one = 1;
  ssize_t n = ::write(fd_.get(), &one, sizeof(one));
  (void)n;  // EAGAIN: already signalled
}

std::deque<protocol::ToolResult> ToolMailbox::Take() {
  uint64_t count = 0;
  ssize_t n = ::read(fd_.get(), &count, sizeof(count));
  (void)n;
  std::deque<protocol::ToolResult> out;
  std::lock_guard lock(mu_);
  out.swap(results_);
  return out;
}

ToolChannel::ToolChannel(const protocol::Execute& job, const common::SecretsPolicy& policy,
                         SendFn send)
    : job_(job),
      policy_(policy),
      send_(std::move(send)),
      timeout_(std::min(job.tool_timeout_ms ? job.tool_timeout_ms : kDefaultTimeoutMs,
                        protocol::kMaxToolTimeoutMs)) {}

bool ToolChannel::Read(int fd, TimePoint now) {
  std::array<char, 64 * 1024> buf;
  // Bounded per wake, so a chatty sandbox cannot hold the driver's loop.
  for (int reads = 0; reads < 16; ++reads) {
    ssize_t r = ::read(fd, buf.data(), buf.size());
    if (r == 0) return false;
    if (r < 0) return errno == EAGAIN || errno == EINTR;
    std::string_view data(buf.data(), static_cast<size_t>(r));
    while (!data.empty()) {
      const size_t nl = data.find('\n');
      const std::string_view part = data.substr(0, nl);
      if (!discarding_ && in_.size() + part.size() > kMaxLine) {
        discarding_ = true;
        in_.clear();
        ReplyError("null", "ToolRefused",
                   "a request over " + std::to_string(kMaxLine) + " bytes was dropped");
      }
      if (!discarding_) in_.append(part);
      if (nl == std::string_view::npos) break;
      if (!discarding_) OnLine(in_, now);
      in_.clear();
      discarding_ = false;
      data.remove_prefix(nl + 1);
    }
  }
  return true;
}

void ToolChannel::OnLine(std::string_view line, TimePoint now) {
  if (line.empty()) return;
  auto parsed = common::ParseJson(line, {.max_depth = 64, .max_values = 1u << 16}, "tool request");
  std::string id = "null";
  if (parsed.ok() && parsed->is_object()) {
    auto it = parsed->find("id");
    if (it != parsed->end() && it->is_number_integer() && *it >= 0 &&
        it->get<uint64_t>() <= kMaxId) {
      id = it->dump();
    }
  }
  auto refuse = [&](const std::string& why) { ReplyError(id, "ToolRefused", why); };
  if (!parsed.ok()) return refuse(parsed.status().message());
  if (id == "null") return refuse("a request needs an integer \"id\" from 0 to 2^53");
  const nlohmann::json& req = *parsed;
  auto name_it = req.find("name");
  if (name_it == req.end() || !name_it->is_string()) return refuse("a request needs a \"name\"");
  const std::string& name = name_it->get_ref<const std::string&>();
  static const nlohmann::json kNoArguments = nlohmann::json::object();
  auto args_it = req.find("arguments");
  const nlohmann::json& args = args_it == req.end() ? kNoArguments : *args_it;
  if (!args.is_object()) return refuse("arguments must be a JSON object");
  if (job_.tools.empty()) return refuse("this execution declares no tools");
  if (std::find(job_.tools.begin(), job_.tools.end(), name) == job_.tools.end()) {
    return refuse("undeclared tool \"" + name.substr(0, protocol::kMaxToolNameBytes) + "\"");
  }
  for (const auto& [call, w] : waiting_) {
    if (w.id == id) return refuse("a call with id " + id + " is already waiting");
  }
  if (waiting_.size() >= kMaxInFlight) {
    return refuse("at most " + std::to_string(kMaxInFlight) + " calls may wait at once");
  }
  if (calls_ >= kMaxCalls) {
    return refuse("at most " + std::to_string(kMaxCalls) + " calls per execution");
  }
  std::string text = common::DumpJson(args);
  if (text.size() > protocol::kMaxToolArgumentBytes) {
    return refuse("arguments of " + std::to_string(text.size()) + " bytes, above the maximum of " +
                  std::to_string(protocol::kMaxToolArgumentBytes));
  }
  const uint64_t call = ++calls_;
  waiting_.emplace(call, Waiting{id, now + timeout_});
  send_(protocol::ToolCall{job_.job_id, call, name, policy_.Mask(text)});
}

void ToolChannel::OnResult(const protocol::ToolResult& result) {
  auto it = waiting_.find(result.call);
  if (it == waiting_.end()) return;  // timed out already, or never asked
  const std::string id = std::move(it->second.id);
  waiting_.erase(it);
  // The broker checked the result; a line break would still break the
  // sandbox's framing, so it is not trusted blindly.
  if (result.ok && !result.result_json.empty() &&
      result.result_json.find('\n') == std::string::npos) {
    return Reply(id, "\"result\":" + result.result_json);
  }
  if (result.ok) return ReplyError(id, "ToolError", "the answer was not valid JSON");
  ReplyError(id, KnownErrorType(result.error_type) ? result.error_type : "ToolError",
             result.error_message);
}

void ToolChannel::Tick(TimePoint now) {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (it->second.deadline > now) {
      ++it;
      continue;
    }
    ReplyError(it->second.id, "ToolTimeout",
               "no answer within " + std::to_string(timeout_.count()) + " ms");
    it = waiting_.erase(it);
  }
}

std::optional<ToolChannel::TimePoint> ToolChannel::NextDeadline() const {
  std::optional<TimePoint> next;
  for (const auto& [call, w] : waiting_) {
    if (!next || w.deadline < *next) next = w.deadline;
  }
  return next;
}

void ToolChannel::Close() {
  for (const auto& [call, w] : waiting_) {
    ReplyError(w.id, "ToolUnavailable", "the execution ended before the answer came");
  }
  waiting_.clear();
}

void ToolChannel::Reply(std::string_view id, std::string_view body) {
  std::string line;
  line.reserve(body.size() + id.size() + 10);
  line.append("{\"id\":").append(id).append(",").append(body).append("}\n");
  if (out_.size() - written_ + line.size() > kMaxUnwritten) return;  // the sandbox stopped reading
  out_.append(line);
}

void ToolChannel::ReplyError(std::string_view id, std::string_view type, std::string_view message) {
  Reply(id, "\"error\":{\"type\":\"" + std::string(type) +
                "\",\"message\":" + common::DumpJson(std::string(message)) + "}");
}

void ToolChannel::Write(int fd) {
  while (written_ < out_.size()) {
    ssize_t w =
        ::send(fd, out_.data() + written_, out_.size() - written_, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      written_ += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && (errno == EAGAIN || errno == EINTR)) return;
    written_ = out_.size();  // the sandbox closed its end: nobody to tell
  }
  out_.clear();
  written_ = 0;
}

}  // namespace kiln::worker
