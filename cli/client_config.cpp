#include "cli/client_config.hpp"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/config/yaml_reader.hpp"

namespace kiln::cli {
namespace {

using common::Status;
using common::StatusOr;

// The first set, non-empty value among `candidates`, with its source name.
struct Candidate {
  std::optional<std::string> value;
  const char* source;
};

bool Pick(std::initializer_list<Candidate> candidates, std::string* value, std::string* source) {
  for (const auto& c : candidates) {
    if (c.value && !c.value->empty()) {
      *value = *c.value;
      *source = c.source;
      return true;
    }
  }
  return false;
}

}  // namespace

EnvLookup EnvFromProcess() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

StatusOr<ConfigFile> ParseConfigFile(const std::string& text, const std::string& name) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return common::InvalidRequest(name + ": " + e.what());
  }
  if (root.IsNull()) return ConfigFile{};  // empty file
  if (!root.IsMap()) return common::InvalidRequest(name + ": expected a mapping of keys");
  common::YamlReader reader(root, "");
  ConfigFile file;
  std::string url, token, admin_token;
  reader.Get("url", &url);
  reader.Get("token", &token);
  reader.Get("admin_token", &admin_token);
  RETURN_IF_ERROR(reader.Finish().WithContext(name));
  if (reader.Has("url")) file.url = url;
  if (reader.Has("token")) file.token = token;
  if (reader.Has("admin_token")) file.admin_token = admin_token;
  return file;
}

std::optional<ConfigPath> FindConfigPath(const EnvLookup& env) {
  if (auto p = env("KILN_CONFIG"); p && !p->empty()) return ConfigPath{*p, true};
  if (auto xdg = env("XDG_CONFIG_HOME"); xdg && !xdg->empty()) {
    return ConfigPath{*xdg + "/kiln/config.yaml", false};
  }
  if (auto home = env("HOME"); home && !home->empty()) {
    return ConfigPath{*home + "/.config/kiln/config.yaml", false};
  }
  return std::nullopt;
}

StatusOr<ConfigFile> LoadConfigFile(const EnvLookup& env) {
  auto where = FindConfigPath(env);
  if (!where) return ConfigFile{};
  std::error_code ec;
  if (!std::filesystem::exists(where->path, ec)) {
    if (where->required) {
      return common::InvalidRequest("config file " + where->path +
                                    " (from $KILN_CONFIG) not found");
    }
    return ConfigFile{};
  }
  std::ifstream in(where->path, std::ios::binary);
  if (!in) return common::InvalidRequest("cannot read config file " + where->path);
  std::ostringstream text;
  text << in.rdbuf();
  return ParseConfigFile(text.str(), where->path);
}

ClientConfig ResolveClientConfig(const GlobalFlags& flags, TokenRole role, const EnvLookup& env,
                                 const ConfigFile& file) {
  ClientConfig cfg;
  std::string url_source;
  if (!Pick({{flags.url, "--url"}, {env("KILN_URL"), "$KILN_URL"}, {file.url, "config file"}},
            &cfg.url, &url_source)) {
    cfg.url = kDefaultUrl;
  }
  while (!cfg.url.empty() && cfg.url.back() == '/') cfg.url.pop_back();
  if (role == TokenRole::kNone) {
    if (flags.token) {
      cfg.token = *flags.token;
      cfg.source = "--token";
    }
    return cfg;
  }
  if (role == TokenRole::kAdmin && Pick({{flags.token, "--token"},
                                         {env("KILN_ADMIN_TOKEN"), "$KILN_ADMIN_TOKEN"},
                                         {file.admin_token, "admin_token in the config file"}},
                                        &cfg.token, &cfg.source)) {
    return cfg;
  }
  Pick({{flags.token, "--token"},
        {env("KILN_TOKEN"), "$KILN_TOKEN"},
        {file.token, "token in the config file"}},
       &cfg.token, &cfg.source);
  return cfg;
}

StatusOr<ClientConfig> LoadClientConfig(const GlobalFlags& flags, TokenRole role,
                                        const EnvLookup& env) {
  ASSIGN_OR_RETURN(ConfigFile file, LoadConfigFile(env));
  ClientConfig cfg = ResolveClientConfig(flags, role, env, file);
  if (role != TokenRole::kNone && cfg.token.empty()) {
    const char* where = role == TokenRole::kAdmin
                            ? "pass --token, set $KILN_ADMIN_TOKEN or add admin_token"
                            : "pass --token, set $KILN_TOKEN or add token";
    return Status(common::Code::kUnauthorized,
                  std::string("no token: ") + where + " to ~/.config/kiln/config.yaml");
  }
  return cfg;
}

}  // namespace kiln::cli
