#include "common/protocol/client_messages.hpp"

namespace kiln::common::protocol::client {

MessageType TypeOf(const Message& m) {
  static constexpr MessageType kTypes[] = {
      MessageType::kSubmit,   MessageType::kSubscribe,    MessageType::kCancel,
      MessageType::kGet,      MessageType::kAccepted,     MessageType::kOutput,
      MessageType::kResult,   MessageType::kError,        MessageType::kToolAnswer,
      MessageType::kToolCall, MessageType::kToolAnswered,
  };
  static_assert(std::size(kTypes) == std::variant_size_v<Message>);
  return kTypes[m.index()];
}

const char* TypeName(MessageType t) {
  switch (t) {
    case MessageType::kSubmit:
      return "submit";
    case MessageType::kSubscribe:
      return "subscribe";
    case MessageType::kCancel:
      return "cancel";
    case MessageType::kGet:
      return "get";
    case MessageType::kAccepted:
      return "accepted";
    case MessageType::kOutput:
      return "output";
    case MessageType::kResult:
      return "result";
    case MessageType::kError:
      return "error";
    case MessageType::kToolAnswer:
      return "tool_answer";
    case MessageType::kToolCall:
      return "tool_call";
    case MessageType::kToolAnswered:
      return "tool_answered";
  }
  return "unknown";
}

uint64_t RequestIdOf(const Message& m) {
  return std::visit([](const auto& body) { return body.request_id; }, m);
}

}  // namespace kiln::common::protocol::client
