// FakeBackend: a scripted stand-in for the broker, for unit tests of the MCP
// server's pure logic. Records every request; answers with what the test set.
// Thread-safe (the stdio loop calls it from several threads).
#pragma once

#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "cli/mcp/backend.hpp"

namespace kiln::cli::mcp {

class FakeBackend final : public Backend {
 public:
  common::StatusOr<nlohmann::json> capabilities =
      nlohmann::json{{"code_execution", true}, {"runtimes", {"python", "javascript", "shell"}}};
  common::StatusOr<nlohmann::json> submit_answer = nlohmann::json::object();
  common::StatusOr<nlohmann::json> sessions_answer =
      nlohmann::json{{"sessions", nlohmann::json::array()}};
  common::StatusOr<nlohmann::json> delete_answer = nlohmann::json::object();
  std::chrono::milliseconds submit_delay{0};

  common::StatusOr<nlohmann::json> Submit(const nlohmann::json& body,
                                          std::chrono::seconds read_timeout,
                                          const std::string& idempotency_key) override {
    {
      std::lock_guard lock(mu_);
      submits_.push_back(body);
      read_timeouts_.push_back(read_timeout);
      keys_.push_back(idempotency_key);
    }
    // A `wait: false` submit (how a cancellation learns the job's id) answers at once.
    if (!body.value("wait", true)) return nlohmann::json{{"id", "ex_1"}, {"status", "running"}};
    std::this_thread::sleep_for(submit_delay);
    // Echo the code so concurrent calls can be told apart.
    if (submit_answer.ok() && submit_answer->contains("echo")) {
      return nlohmann::json{{"id", "ex_1"}, {"status", "succeeded"}, {"stdout", body["code"]}};
    }
    return submit_answer;
  }
  common::StatusOr<nlohmann::json> ListSessions(const std::string& conversation_id) override {
    std::lock_guard lock(mu_);
    listed_.push_back(conversation_id);
    return sessions_answer;
  }
  common::StatusOr<nlohmann::json> DeleteSession(const std::string& id) override {
    std::lock_guard lock(mu_);
    deleted_.push_back(id);
    return delete_answer;
  }
  common::StatusOr<nlohmann::json> Cancel(const std::string& id) override {
    std::lock_guard lock(mu_);
    cancelled_.push_back(id);
    return nlohmann::json{{"id", id}, {"status", "cancelled"}};
  }
  common::StatusOr<nlohmann::json> Capabilities() override {
    std::lock_guard lock(mu_);
    ++probes_;
    return capabilities;
  }

  std::vector<nlohmann::json> submits() const {
    std::lock_guard lock(mu_);
    return submits_;
  }
  std::vector<std::chrono::seconds> read_timeouts() const {
    std::lock_guard lock(mu_);
    return read_timeouts_;
  }
  std::vector<std::string> listed() const {
    std::lock_guard lock(mu_);
    return listed_;
  }
  std::vector<std::string> deleted() const {
    std::lock_guard lock(mu_);
    return deleted_;
  }
  std::vector<std::string> keys() const {
    std::lock_guard lock(mu_);
    return keys_;
  }
  std::vector<std::string> cancelled() const {
    std::lock_guard lock(mu_);
    return cancelled_;
  }
  int probes() const {
    std::lock_guard lock(mu_);
    return probes_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<nlohmann::json> submits_;
  std::vector<std::chrono::seconds> read_timeouts_;
  std::vector<std::string> listed_;
  std::vector<std::string> deleted_;
  std::vector<std::string> keys_;
  std::vector<std::string> cancelled_;
  int probes_ = 0;
};

}  // namespace kiln::cli::mcp
