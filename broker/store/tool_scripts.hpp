// The Lua scripts behind ToolStore: a tool call opened on its job's stream,
// and answered at most once. Only ToolStore runs them.
#pragma once

#include "broker/store/redis_connection.hpp"

namespace kiln::broker::scripts {

const RedisScript& OpenToolCall();
const RedisScript& AnswerToolCall();

}  // namespace kiln::broker::scripts
