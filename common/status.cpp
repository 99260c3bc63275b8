#include "common/status.hpp"

#include <cstring>

namespace kiln::common {

std::string_view CodeName(Code code) {
  switch (code) {
    case Code::kOk:
      return "OK";
    case Code::kInvalidRequest:
      return "INVALID_REQUEST";
    case Code::kUnauthorized:
      return "UNAUTHORIZED";
    case Code::kForbidden:
      return "FORBIDDEN";
    case Code::kLimitExceeded:
      return "LIMIT_EXCEEDED";
    case Code::kRuntimeUnavailable:
      return "RUNTIME_UNAVAILABLE";
    case Code::kSecurityBlocked:
      return "SECURITY_BLOCKED";
    case Code::kQueueFull:
      return "QUEUE_FULL";
    case Code::kSessionNotFound:
      return "SESSION_NOT_FOUND";
    case Code::kSessionForbidden:
      return "SESSION_FORBIDDEN";
    case Code::kSessionLanguageMismatch:
      return "SESSION_LANGUAGE_MISMATCH";
    case Code::kSessionBusyLimit:
      return "SESSION_BUSY_LIMIT";
    case Code::kSessionLost:
      return "SESSION_LOST";
    case Code::kWorkerLost:
      return "WORKER_LOST";
    case Code::kApprovalDenied:
      return "APPROVAL_DENIED";
    case Code::kApprovalExpired:
      return "APPROVAL_EXPIRED";
    case Code::kCancelled:
      return "CANCELLED";
    case Code::kTimeout:
      return "TIMEOUT";
    case Code::kMemoryExceeded:
      return "MEMORY_EXCEEDED";
    case Code::kOutputLimit:
      return "OUTPUT_LIMIT";
    case Code::kPackageInstallFailed:
      return "PACKAGE_INSTALL_FAILED";
    case Code::kNetworkNotAllowed:
      return "NETWORK_NOT_ALLOWED";
    case Code::kNetworkLimit:
      return "NETWORK_LIMIT";
    case Code::kCodeExecutionDisabled:
      return "CODE_EXECUTION_DISABLED";
    case Code::kRateLimited:
      return "RATE_LIMITED";
    case Code::kMethodNotAllowed:
      return "METHOD_NOT_ALLOWED";
    case Code::kPayloadTooLarge:
      return "PAYLOAD_TOO_LARGE";
    case Code::kRequestTimeout:
      return "REQUEST_TIMEOUT";
    case Code::kToolCallClosed:
      return "TOOL_CALL_CLOSED";
    case Code::kNotFound:
      return "NOT_FOUND";
    case Code::kUnavailable:
      return "UNAVAILABLE";
    case Code::kInternal:
      return "INTERNAL";
  }
  return "INTERNAL";
}

int HttpStatusFor(Code code) {
  switch (code) {
    case Code::kOk:
      return 200;
    case Code::kUnauthorized:
      return 401;
    case Code::kForbidden:
    case Code::kSessionForbidden:
    case Code::kCodeExecutionDisabled:
    case Code::kNetworkNotAllowed:
      return 403;
    case Code::kNotFound:
    case Code::kSessionNotFound:
      return 404;
    case Code::kSessionLanguageMismatch:
    case Code::kSessionBusyLimit:
    case Code::kToolCallClosed:
      return 409;
    case Code::kSessionLost:
      return 410;
    case Code::kQueueFull:
    case Code::kRateLimited:
      return 429;
    case Code::kMethodNotAllowed:
      return 405;
    case Code::kPayloadTooLarge:
      return 413;
    case Code::kRequestTimeout:
      return 408;
    case Code::kUnavailable:
    case Code::kRuntimeUnavailable:
      return 503;
    case Code::kInternal:
      return 500;
    default:
      return 400;
  }
}

bool IsRetryable(Code code) {
  switch (code) {
    case Code::kQueueFull:
    case Code::kRateLimited:
    case Code::kRequestTimeout:
    case Code::kUnavailable:
    case Code::kRuntimeUnavailable:
    case Code::kSessionBusyLimit:
    case Code::kWorkerLost:
      return true;
    default:
      return false;
  }
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  m += ": ";
  m += message_;
  return {code_, std::move(m)};
}

std::string Status::ToString() const {
  std::string s(CodeName(code_));
  if (!message_.empty()) {
    s += ": ";
    s += message_;
  }
  return s;
}

Status ErrnoStatus(std::string_view what, int err) {
  std::string m(what);
  m += ": ";
  m += std::strerror(err);
  return {Code::kInternal, std::move(m)};
}

}  // namespace kiln::common
