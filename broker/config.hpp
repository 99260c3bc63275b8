// BrokerConfig: everything kiln-broker reads from its YAML file, with defaults.
//
//   ASSIGN_OR_RETURN(BrokerConfig cfg, LoadBrokerConfig("/etc/kiln/broker.yaml"));
//
// docs/configuration.md documents every key. Unknown keys and bad values are
// refused with a message naming the key. Plain data; any thread after load.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/protocol/messages.hpp"
#include "common/status.hpp"

namespace kiln::broker {

struct TenantConfig {
  std::string name;
  std::vector<std::string> tokens;
  // Literal secrets masked with *** in everything this tenant's jobs return.
  std::vector<std::string> secrets;
};

struct BrokerConfig {
  std::string id;  // default: <hostname>-<pid>
  // HTTP front end.
  std::string http_listen = "127.0.0.1:8080";
  uint32_t http_threads = 32;           // concurrent HTTP requests (wait:true holds one)
  uint64_t max_body_bytes = 16u << 20;  // request body cap
  // Worker endpoint (ZeroMQ ROUTER).
  std::string worker_endpoint = "tcp://127.0.0.1:5555";
  uint32_t heartbeat_interval_ms = 1000;
  uint32_t heartbeat_liveness = 3;
  // Redis.
  std::string redis_url = "redis://127.0.0.1:6379";
  uint32_t redis_pool_size = 8;
  uint64_t job_ttl_s = 86400;  // how long records stay readable
  // Jobs.
  common::protocol::Limits default_limits{30000, 256, 30000, 102400, 64};
  common::protocol::Limits max_limits{300000, 2048, 300000, 10u << 20, 256};
  uint64_t max_code_bytes = 1u << 20;
  uint64_t max_input_bytes = 1u << 20;
  uint64_t max_files_bytes = 10u << 20;
  uint64_t max_queue = 10000;     // jobs waiting for a slot, this broker
  uint64_t wait_grace_ms = 5000;  // wait:true answers after timeout + grace at the latest
  // Auth.
  std::vector<TenantConfig> tenants;
  std::vector<std::string> admin_tokens;
  // Logging.
  std::string log_level = "info";
  std::string log_format = "text";
};

common::StatusOr<BrokerConfig> LoadBrokerConfig(const std::string& file);

}  // namespace kiln::broker
