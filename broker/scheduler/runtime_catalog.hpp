// RuntimeCatalog: what one worker's sandboxes offer (interpreter versions and
// package sets, docs/runtimes.md "Package sets"), parsed once from its
// Register, where every byte is the worker's and untrusted: malformed,
// oversized or duplicate entries and languages the worker does not offer are
// dropped. RuntimesJson merges the catalogs of the live workers a tenant's
// jobs can run on into GET /v1/runtimes' body.
//
//   auto catalog = std::make_shared<const RuntimeCatalog>(ParseRuntimeCatalog(reg));
//   json body = RuntimesJson({{&reg.runtimes, catalog.get()}, ...});
//
// Pure; a built catalog is immutable and may be shared between threads.
#pragma once

#include <cstddef>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/protocol/messages.hpp"

namespace kiln::broker {

struct CatalogPackage {
  std::string name;
  std::string version;
};

struct RuntimeCatalog {
  std::map<std::string, std::string> versions;  // language -> interpreter version
  // language -> its packages, sorted by name, one entry per name.
  std::map<std::string, std::vector<CatalogPackage>> packages;
  size_t dropped = 0;  // entries refused
};

RuntimeCatalog ParseRuntimeCatalog(const common::protocol::Register& reg);

// One live worker: the languages it offers and its catalog (null: none).
struct OfferedRuntimes {
  const std::vector<std::string>* runtimes;
  const RuntimeCatalog* catalog;
};

// {"runtimes": [{"language", "versions": [...], "workers": n,
//   "packages": [{"name", "version"}],            on every such worker, one version
//   "partial": [{"name", "versions": [...], "workers": k}]}]}   the others
// Languages sorted by name; a language appears when a worker offers it.
nlohmann::json RuntimesJson(const std::vector<OfferedRuntimes>& workers);

}  // namespace kiln::broker
