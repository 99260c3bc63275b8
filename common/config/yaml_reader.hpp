// YamlReader: strict, typed reading of one YAML mapping for config loaders.
//
//   YamlReader r(node, "broker.http");
//   r.Get("listen", &cfg.listen);  r.Get("threads", &cfg.threads);
//   RETURN_IF_ERROR(r.Finish());   // unknown keys and bad values -> error naming the key
//
// Every key read is remembered; Finish() refuses keys nobody asked for, so a
// typo in a config file stops the process at start instead of being ignored.
// Errors name the full dotted path ("broker.http.threads: expected an integer").
// Plain object, one thread.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/status.hpp"

namespace kiln::common {

class YamlReader {
 public:
  // `node` may be null/undefined (an absent section): every Get keeps its default.
  YamlReader(YAML::Node node, std::string path);

  // Each Get leaves *out unchanged when the key is absent and records the
  // first error (wrong type, out of range) for Finish().
  void Get(const std::string& key, std::string* out);
  void Get(const std::string& key, bool* out);
  void Get(const std::string& key, uint64_t* out, uint64_t min = 0, uint64_t max = UINT64_MAX);
  void Get(const std::string& key, uint32_t* out, uint32_t min = 0, uint32_t max = UINT32_MAX);
  void Get(const std::string& key, double* out, double min, double max);
  void Get(const std::string& key, std::vector<std::string>* out);
  void Get(const std::string& key, std::map<std::string, std::string>* out);
  // A sub-mapping (absent -> an empty reader). Its keys are checked when its
  // own Finish() runs; call it before this reader's Finish().
  YamlReader Child(const std::string& key);
  // The raw node of a sequence of mappings, e.g. `tenants:`; marks the key used.
  YAML::Node Sequence(const std::string& key);
  // The raw node of a key another parser checks (absent: a null node); marks it used.
  YAML::Node Raw(const std::string& key) { return Find(key); }
  // Requires the key to hold one of `allowed`.
  void GetEnum(const std::string& key, std::string* out, const std::set<std::string>& allowed);

  bool Has(const std::string& key) const;
  const std::string& path() const { return path_; }
  void Fail(const std::string& key, const std::string& what);
  // First error, else an error for the first unknown key, else OK.
  Status Finish();

 private:
  std::string KeyPath(const std::string& key) const;
  YAML::Node Find(const std::string& key);

  YAML::Node node_;
  std::string path_;
  std::set<std::string> used_;
  Status error_;
};

// Loads a YAML file; a parse error names the file, line and column.
StatusOr<YAML::Node> LoadYamlFile(const std::string& file);

}  // namespace kiln::common
