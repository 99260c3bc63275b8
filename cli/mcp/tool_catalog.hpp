// ToolCatalog: which MCP tools `kiln mcp` offers and their JSON schemas.
//
//   ASSIGN_OR_RETURN(Offer offer, OfferFromCapabilities(backend->Capabilities()));
//   ToolCatalog catalog(offer);  catalog.List();  // the tools/list answer's "tools"
//
// execute_code is offered only when the broker says code execution is enabled
// for the caller's tenant (GET /v1/capabilities; a broker without that
// endpoint answers 404 and counts as enabled), with `runtime` limited to the
// runtimes it names. list_sessions and kill_session are always offered. Every
// tool has an inputSchema and an outputSchema; error results (isError: true)
// still match the outputSchema, since MCP clients validate them too.
// Immutable after construction; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.hpp"

namespace kiln::cli::mcp {

inline constexpr char kExecuteCode[] = "execute_code";
inline constexpr char kListSessions[] = "list_sessions";
inline constexpr char kKillSession[] = "kill_session";
inline constexpr size_t kMaxPackageNames = 300;

// What the broker lets this tenant do.
struct Offer {
  bool code_execution = true;
  std::vector<std::string> runtimes = {"python", "javascript", "shell"};
  // Pre-installed packages per runtime (capabilities' "packages"), named in
  // execute_code's description; at most kMaxPackageNames per runtime.
  std::map<std::string, std::vector<std::string>> packages;
  // The tenant's network allowlist (capabilities' "network.allow"): with
  // entries, execute_code offers `network` and names them; empty, it says
  // there is no network.
  std::vector<std::string> network_allow;
  // The broker's limits (capabilities' "limits"; 0 where it did not say):
  // named in execute_code's description; max_timeout_ms bounds timeoutMs.
  struct Limits {
    uint64_t default_timeout_ms = 0;
    uint64_t max_timeout_ms = 0;
    uint64_t memory_mb = 0;         // what a call gets (execute_code cannot ask more)
    uint64_t max_output_bytes = 0;  // stdout and stderr together, likewise
    uint64_t max_code_bytes = 0;
    uint64_t max_files_bytes = 0;
  } limits;
  uint64_t session_ttl_s = 0;  // an idle session ends after this; 0: not said
  std::string note;            // why the probe was inconclusive, for the log; empty if it was not
};

// The offer that a GET /v1/capabilities answer implies. UNAUTHORIZED and
// FORBIDDEN stay errors (the server cannot work with that token); NOT_FOUND
// (an older broker) and network trouble mean "enabled, all runtimes" (with a
// note for the latter); CODE_EXECUTION_DISABLED means disabled. Package
// names that are not short plain strings are ignored, and so are limits that
// are not positive integers.
common::StatusOr<Offer> OfferFromCapabilities(const common::StatusOr<nlohmann::json>& answer);

class ToolCatalog {
 public:
  explicit ToolCatalog(Offer offer);

  // The tool definitions, in the order offered.
  const nlohmann::json& List() const { return tools_; }
  // Whether `name` is offered.
  bool Offers(const std::string& name) const;
  const Offer& offer() const { return offer_; }

 private:
  Offer offer_;
  nlohmann::json tools_;
};

}  // namespace kiln::cli::mcp
