#include "common/protocol/messages.hpp"

#include <type_traits>

namespace kiln::common::protocol {
namespace {

// The wire type number of each message struct, checked at compile time so the
// variant and the enum cannot drift apart.
template <typename T>
constexpr MessageType kTypeOf = MessageType{0};
template <>
constexpr MessageType kTypeOf<Register> = MessageType::kRegister;
template <>
constexpr MessageType kTypeOf<RegisterAck> = MessageType::kRegisterAck;
template <>
constexpr MessageType kTypeOf<Heartbeat> = MessageType::kHeartbeat;
template <>
constexpr MessageType kTypeOf<Execute> = MessageType::kExecute;
template <>
constexpr MessageType kTypeOf<OutputChunk> = MessageType::kOutputChunk;
template <>
constexpr MessageType kTypeOf<Result> = MessageType::kResult;
template <>
constexpr MessageType kTypeOf<Cancel> = MessageType::kCancel;
template <>
constexpr MessageType kTypeOf<Disconnect> = MessageType::kDisconnect;
template <>
constexpr MessageType kTypeOf<CloseSession> = MessageType::kCloseSession;
template <>
constexpr MessageType kTypeOf<ResultAck> = MessageType::kResultAck;
template <>
constexpr MessageType kTypeOf<ToolCall> = MessageType::kToolCall;
template <>
constexpr MessageType kTypeOf<ToolResult> = MessageType::kToolResult;

}  // namespace

MessageType TypeOf(const Message& m) {
  return std::visit(
      [](const auto& body) {
        using T = std::decay_t<decltype(body)>;
        static_assert(kTypeOf<T> != MessageType{0}, "message struct without a wire type");
        return kTypeOf<T>;
      },
      m);
}

const char* TypeName(MessageType t) {
  switch (t) {
    case MessageType::kRegister:
      return "register";
    case MessageType::kRegisterAck:
      return "register_ack";
    case MessageType::kHeartbeat:
      return "heartbeat";
    case MessageType::kExecute:
      return "execute";
    case MessageType::kOutputChunk:
      return "output_chunk";
    case MessageType::kResult:
      return "result";
    case MessageType::kCancel:
      return "cancel";
    case MessageType::kCloseSession:
      return "close_session";
    case MessageType::kDisconnect:
      return "disconnect";
    case MessageType::kResultAck:
      return "result_ack";
    case MessageType::kToolCall:
      return "tool_call";
    case MessageType::kToolResult:
      return "tool_result";
  }
  return "unknown";
}

const char* EndReasonName(EndReason r) {
  switch (r) {
    case EndReason::kExit:
      return "exit";
    case EndReason::kTimeout:
      return "timeout";
    case EndReason::kMemoryExceeded:
      return "memory_exceeded";
    case EndReason::kOutputLimit:
      return "output_limit";
    case EndReason::kCancelled:
      return "cancelled";
    case EndReason::kSandboxViolation:
      return "sandbox_violation";
    case EndReason::kError:
      return "error";
    case EndReason::kRefused:
      return "refused";
    case EndReason::kNetworkLimit:
      return "network_limit";
  }
  return "unknown";
}

}  // namespace kiln::common::protocol
