#include "cli/exit_codes.hpp"

#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace kiln::cli {
namespace {

using common::Code;
using nlohmann::json;

constexpr std::array kInfrastructureCodes = {
    Code::kQueueFull,  Code::kRuntimeUnavailable, Code::kSessionBusyLimit, Code::kSessionLost,
    Code::kWorkerLost, Code::kUnavailable,        Code::kInternal,         Code::kOutputLimit,
};

bool IsInfrastructureName(const std::string& name) {
  for (Code c : kInfrastructureCodes) {
    if (common::CodeName(c) == name) return true;
  }
  return false;
}

// An integer field of the record, or nullopt when absent, null or not a number.
std::optional<int64_t> IntField(const json& record, const char* key) {
  auto it = record.find(key);
  if (it == record.end() || !it->is_number()) return std::nullopt;
  return it->get<int64_t>();
}

std::string ErrorCodeName(const json& record) {
  auto it = record.find("error");
  if (it == record.end() || !it->is_object()) return "";
  auto code = it->find("code");
  return code != it->end() && code->is_string() ? code->get<std::string>() : "";
}

int ExitCodeForFailure(const json& record) {
  if (auto code = IntField(record, "exit_code"); code && *code >= 1 && *code <= 255) {
    return static_cast<int>(*code);
  }
  if (auto signal = IntField(record, "signal"); signal && *signal >= 1 && *signal <= 127) {
    return kExitSignalBase + static_cast<int>(*signal);
  }
  return kExitFailed;
}

}  // namespace

bool IsInfrastructureCode(Code code) {
  for (Code c : kInfrastructureCodes) {
    if (c == code) return true;
  }
  return false;
}

int ExitCodeForRecord(const json& record) {
  auto it = record.find("status");
  const std::string status = it != record.end() && it->is_string() ? it->get<std::string>() : "";
  if (status == "succeeded") return kExitOk;
  if (status == "failed") return ExitCodeForFailure(record);
  if (status == "timed_out") return kExitTimedOut;
  if (status == "memory_exceeded") return kExitMemoryExceeded;
  if (status == "cancelled") return kExitCancelled;
  if (status == "rejected") {
    return IsInfrastructureName(ErrorCodeName(record)) ? kExitUnavailable : kExitRejected;
  }
  if (status == "queued" || status == "awaiting_approval" || status == "running") {
    return kExitPending;
  }
  return kExitUnavailable;  // "error", or a status this client does not know
}

int ExitCodeForStatus(const common::Status& status) {
  switch (status.code()) {
    case Code::kOk:
      return kExitOk;
    case Code::kSecurityBlocked:
    case Code::kApprovalDenied:
    case Code::kApprovalExpired:
      return kExitRejected;
    case Code::kTimeout:
      return kExitTimedOut;
    case Code::kMemoryExceeded:
      return kExitMemoryExceeded;
    case Code::kCancelled:
      return kExitCancelled;
    default:
      break;
  }
  return IsInfrastructureCode(status.code()) ? kExitUnavailable : kExitUsage;
}

}  // namespace kiln::cli
