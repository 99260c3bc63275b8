// ClientConfig: which broker the kiln CLI talks to and with which token.
//
//   ASSIGN_OR_RETURN(auto cfg, ResolveClientConfig(flags, TokenRole::kAdmin, EnvFromProcess()));
//   ApiClient::Create(cfg.url, cfg.token);
//
// Each value comes from the first source that sets it (docs/cli.md):
//   url:   --url, $KILN_URL, `url:` in the config file, http://127.0.0.1:8080
//   token: --token, $KILN_TOKEN, `token:` in the config file
// For admin commands (`kiln workers`) the admin sources come first:
//   --token, $KILN_ADMIN_TOKEN, `admin_token:`, then the tenant sources above.
// The config file is $KILN_CONFIG (which must exist when set), else
// $XDG_CONFIG_HOME/kiln/config.yaml, else ~/.config/kiln/config.yaml (absent
// is fine). It is a YAML mapping with the keys url, token and admin_token only;
// any other key is an error. Pure apart from reading that file; any thread.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "common/status.hpp"

namespace kiln::cli {

inline constexpr char kDefaultUrl[] = "http://127.0.0.1:8080";

// What the command will call: decides which token sources are consulted.
enum class TokenRole {
  kNone,    // unauthenticated endpoints (health)
  kTenant,  // submit, read executions
  kAdmin,   // workers (and later approve, deny)
};

// Global flags as given on the command line (empty optional: not given).
struct GlobalFlags {
  std::optional<std::string> url;
  std::optional<std::string> token;
};

// The contents of the config file; empty optional: key absent.
struct ConfigFile {
  std::optional<std::string> url;
  std::optional<std::string> token;
  std::optional<std::string> admin_token;
};

struct ClientConfig {
  std::string url;
  std::string token;   // empty when no source gave one
  std::string source;  // where the token came from, for error messages
};

// Reads an environment variable; nullopt when unset. Injected for tests.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup EnvFromProcess();

// Parses config file text (strict: unknown keys, non-string values -> error).
common::StatusOr<ConfigFile> ParseConfigFile(const std::string& text, const std::string& name);

// The config file's path per the rules above; nullopt when no home is known.
// `required` is set when the path came from $KILN_CONFIG.
struct ConfigPath {
  std::string path;
  bool required = false;
};
std::optional<ConfigPath> FindConfigPath(const EnvLookup& env);

// Loads the config file (absent and not required -> empty ConfigFile).
common::StatusOr<ConfigFile> LoadConfigFile(const EnvLookup& env);

// Applies the precedence rules; pure.
ClientConfig ResolveClientConfig(const GlobalFlags& flags, TokenRole role, const EnvLookup& env,
                                 const ConfigFile& file);

// LoadConfigFile + ResolveClientConfig. A role other than kNone without any
// token is an UNAUTHORIZED error that says where a token may be given.
common::StatusOr<ClientConfig> LoadClientConfig(const GlobalFlags& flags, TokenRole role,
                                                const EnvLookup& env);

}  // namespace kiln::cli
