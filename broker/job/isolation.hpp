// Isolation levels and the placement token: how the broker keeps a job on a
// worker of its tenant's level. "standard" is Kiln's Linux sandbox; "gvisor"
// runs it under gVisor's runsc (a second kernel). A tenant runs at one level
// (TenantConfig::isolation); a worker offers one (Register::isolation).
//
//   if (!IsIsolationLevel(tenant.isolation)) return InvalidRequest(...);
//   std::string token = PlacementToken(spec.language, spec.isolation);  // "python@gvisor"
//
// A job goes only to a worker whose capabilities (WorkerSlots::runtimes)
// hold its placement token; this file alone knows how a token is spelled.
// Pure functions; any thread.
#pragma once

#include <string>
#include <string_view>

namespace kiln::broker {

inline constexpr std::string_view kStandardIsolation = "standard";
inline constexpr std::string_view kGvisorIsolation = "gvisor";

// The levels a tenant may ask for and a worker may offer.
bool IsIsolationLevel(std::string_view level);

// "" reads as standard: what workers without levels send, and what the wire
// (Execute::isolation) means when the field is absent.
std::string_view NormalizeIsolation(std::string_view level);

// What a job of `language` at `level` needs from a worker, and what a worker
// offering `language` at `level` provides: "python" at standard (unchanged
// from before levels existed, so jobs queued then still match) and
// "python@gvisor" at any other level.
std::string PlacementToken(std::string_view language, std::string_view level);

// The level as Execute::isolation carries it: empty for standard, so workers
// that predate levels see nothing new.
std::string WireIsolation(std::string_view level);

}  // namespace kiln::broker
