#include "broker/store/redis_probe.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>

namespace kiln::broker {
namespace {

// The oldest Redis whose commands the scripts use (ZRANGE BYSCORE, LPOS).
constexpr int kMinMajor = 6;
constexpr int kMinMinor = 2;

// The value of `field` in INFO's "field:value" lines; empty when absent.
std::string_view InfoField(std::string_view info, std::string_view field) {
  size_t pos = 0;
  while (pos < info.size()) {
    size_t end = info.find('\n', pos);
    if (end == std::string_view::npos) end = info.size();
    std::string_view line = info.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.size() > field.size() && line.starts_with(field) && line[field.size()] == ':') {
      return line.substr(field.size() + 1);
    }
    pos = end + 1;
  }
  return {};
}

// INFO answers while Redis loads, so a Redis too old is known at once.
common::Status CheckVersion(RedisConnection& conn) {
  ASSIGN_OR_RETURN(RedisReply info, conn.Command({"INFO", "server"}));
  const std::string version(InfoField(info.str, "redis_version"));
  int major = 0;
  int minor = 0;
  // A Redis-compatible server that does not say: let it try.
  if (std::sscanf(version.c_str(), "%d.%d", &major, &minor) != 2) return common::Status::Ok();
  if (major > kMinMajor || (major == kMinMajor && minor >= kMinMinor)) {
    return common::Status::Ok();
  }
  return common::Internal("redis " + version + " is too old: Kiln needs " +
                          std::to_string(kMinMajor) + "." + std::to_string(kMinMinor) +
                          " or later");
}

// " (loading its dataset: 42.13% done, about 7 s left)" while Redis loads, else "".
std::string LoadingProgress(RedisConnection& conn) {
  auto info = conn.Command({"INFO", "persistence"});
  if (!info.ok() || InfoField(info->str, "loading") != "1") return "";
  return " (loading its dataset: " + std::string(InfoField(info->str, "loading_loaded_perc")) +
         "% done, about " + std::string(InfoField(info->str, "loading_eta_seconds")) + " s left)";
}

// What an operator can do about an error that waiting does not fix.
std::string Hint(const common::Status& st) {
  const std::string& m = st.message();
  if (m.find("NOAUTH") != std::string::npos) {
    return " (the broker does not send AUTH without a password in the URL: "
           "redis://:password@host or redis://user:password@host)";
  }
  if (m.find("WRONGPASS") != std::string::npos) {
    return " (check the user and password in the URL; a % in them is written %25)";
  }
  if (m.find("NOPERM") != std::string::npos) {
    return " (the broker needs every command on every key)";
  }
  return "";
}

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

common::Status AwaitRedis(const RedisEndpoint& endpoint, std::string_view url,
                          std::span<const RedisStartStep> steps,
                          const std::function<bool(std::chrono::milliseconds)>& pause,
                          const RedisWaitOptions& options) {
  auto conn = RedisConnection::Lazy(endpoint);
  std::vector<RedisStartStep> all = {
      {"answer INFO", [&] { return CheckVersion(*conn); }},
      {"answer PING", [&] { return conn->Command({"PING"}).status(); }},
  };
  all.insert(all.end(), steps.begin(), steps.end());
  const auto start = std::chrono::steady_clock::now();
  int attempts = 0;
  bool waited = false;
  for (const RedisStartStep& step : all) {
    auto delay = options.first_delay;
    auto next_log = std::chrono::steady_clock::now();  // each step's first failure is told
    for (int attempt = 1;; ++attempt) {
      ++attempts;
      const common::Status st = step.run();
      if (st.ok()) break;
      if (st.code() != common::Code::kUnavailable) {
        return common::Status(st.code(), "redis at " + std::string(url) + " (to " + step.what +
                                             "): " + st.message() + Hint(st));
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= next_log) {
        const bool loading = st.message().find("LOADING") != std::string::npos;
        spdlog::warn(
            "waiting for redis at {} to {}: {}{}; waited {:.1f} s, attempt {}, next in {:.1f} s",
            url, step.what, st.message(), loading ? LoadingProgress(*conn) : "",
            Seconds(now - start), attempt, Seconds(delay));
        next_log = now + options.log_every;
      }
      waited = true;
      if (!pause(delay)) {
        return common::Status(common::Code::kCancelled, "stopped while waiting for redis at " +
                                                            std::string(url) + " to " + step.what);
      }
      delay = std::min(delay * 2, options.max_delay);
    }
  }
  if (waited) {
    spdlog::info("redis at {} serves after {:.1f} s ({} attempts)", url,
                 Seconds(std::chrono::steady_clock::now() - start), attempts);
  }
  return common::Status::Ok();
}

RedisProbe::State RedisProbe::state() const {
  std::lock_guard lock(mu_);
  State s = state_;
  const auto stale = std::max<std::chrono::milliseconds>(interval_ * 3, std::chrono::seconds(2));
  if (s.ok && std::chrono::steady_clock::now() - s.last_ok > stale) {
    s.ok = false;
    s.error = "redis: no answer to PING for " +
              std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::steady_clock::now() - s.last_ok)
                                 .count()) +
              " ms";
  }
  if (!ever_ok_ && s.error.empty()) s.error = "redis: not reached yet";
  return s;
}

void RedisProbe::Fresh(std::function<void(State)> done) {
  std::lock_guard lock(mu_);
  waiting_.push_back(std::move(done));
  cv_.notify_all();
}

void RedisProbe::Run(std::stop_token stop) {
  std::stop_callback wake(stop, [this] {
    std::lock_guard lock(mu_);
    cv_.notify_all();
  });
  auto conn = RedisConnection::Lazy(endpoint_);
  while (!stop.stop_requested()) {
    std::vector<std::function<void(State)>> done;
    {
      std::lock_guard lock(mu_);
      done.swap(waiting_);
    }
    auto r = conn->Command({"PING"});
    {
      std::lock_guard lock(mu_);
      if (r.ok()) {
        ever_ok_ = true;
        state_.ok = true;
        state_.error.clear();
        state_.last_ok = std::chrono::steady_clock::now();
      } else {
        state_.ok = false;
        state_.error = r.status().message();
      }
    }
    if (!done.empty()) {
      const State s = state();
      for (auto& fn : done) fn(s);
    }
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, interval_, [&] { return stop.stop_requested() || !waiting_.empty(); });
  }
}

}  // namespace kiln::broker
