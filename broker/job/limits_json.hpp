// LimitsJson: a job's limits as the HTTP API spells them ({"timeout_ms",
// "memory_mb", "cpu_ms", "max_output_bytes", "max_pids"}), for records and
// for GET /v1/capabilities. Pure; any thread.
#pragma once

#include <nlohmann/json.hpp>

#include "common/protocol/messages.hpp"

namespace kiln::broker {

nlohmann::json LimitsJson(const common::protocol::Limits& limits);

}  // namespace kiln::broker
