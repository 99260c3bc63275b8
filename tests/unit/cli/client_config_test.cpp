#include "cli/client_config.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

namespace kiln::cli {
namespace {

EnvLookup FakeEnv(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

ConfigFile File(std::optional<std::string> url, std::optional<std::string> token,
                std::optional<std::string> admin) {
  return {std::move(url), std::move(token), std::move(admin)};
}

TEST(ClientConfigTest, DefaultUrlAndNoToken) {
  ClientConfig c = ResolveClientConfig({}, TokenRole::kTenant, FakeEnv({}), {});
  EXPECT_EQ(c.url, "http://127.0.0.1:8080");
  EXPECT_EQ(c.token, "");
}

TEST(ClientConfigTest, FlagBeatsEnvBeatsFile) {
  auto file = File("http://file:1", "file-token", std::nullopt);
  auto env = FakeEnv({{"KILN_URL", "http://env:2"}, {"KILN_TOKEN", "env-token"}});
  GlobalFlags flags{"http://flag:3/", "flag-token"};
  ClientConfig c = ResolveClientConfig(flags, TokenRole::kTenant, env, file);
  EXPECT_EQ(c.url, "http://flag:3");  // trailing slash dropped
  EXPECT_EQ(c.token, "flag-token");
  c = ResolveClientConfig({}, TokenRole::kTenant, env, file);
  EXPECT_EQ(c.url, "http://env:2");
  EXPECT_EQ(c.token, "env-token");
  c = ResolveClientConfig({}, TokenRole::kTenant, FakeEnv({}), file);
  EXPECT_EQ(c.url, "http://file:1");
  EXPECT_EQ(c.token, "file-token");
}

TEST(ClientConfigTest, EmptyValuesDoNotCount) {
  auto env = FakeEnv({{"KILN_URL", ""}, {"KILN_TOKEN", ""}});
  ClientConfig c =
      ResolveClientConfig({}, TokenRole::kTenant, env, File("http://file:1", "t", std::nullopt));
  EXPECT_EQ(c.url, "http://file:1");
  EXPECT_EQ(c.token, "t");
}

TEST(ClientConfigTest, AdminSourcesComeFirstForAdminCommands) {
  auto file = File(std::nullopt, "file-token", "file-admin");
  auto env = FakeEnv({{"KILN_TOKEN", "env-token"}, {"KILN_ADMIN_TOKEN", "env-admin"}});
  EXPECT_EQ(ResolveClientConfig({}, TokenRole::kAdmin, env, file).token, "env-admin");
  EXPECT_EQ(ResolveClientConfig({}, TokenRole::kTenant, env, file).token, "env-token");
  GlobalFlags flags{std::nullopt, "flag"};
  EXPECT_EQ(ResolveClientConfig(flags, TokenRole::kAdmin, env, file).token, "flag");
  // The config's admin_token beats the tenant $KILN_TOKEN for admin commands.
  auto tenant_env = FakeEnv({{"KILN_TOKEN", "env-token"}});
  EXPECT_EQ(ResolveClientConfig({}, TokenRole::kAdmin, tenant_env, file).token, "file-admin");
  // Without any admin source, the tenant token is tried (the broker decides).
  EXPECT_EQ(ResolveClientConfig({}, TokenRole::kAdmin, tenant_env, File({}, "t", {})).token,
            "env-token");
}

TEST(ClientConfigTest, NoneRoleOnlyUsesAnExplicitToken) {
  auto env = FakeEnv({{"KILN_TOKEN", "env-token"}});
  EXPECT_EQ(ResolveClientConfig({}, TokenRole::kNone, env, {}).token, "");
  EXPECT_EQ(ResolveClientConfig({std::nullopt, "f"}, TokenRole::kNone, env, {}).token, "f");
}

TEST(ClientConfigTest, ParseConfigFile) {
  auto f = ParseConfigFile("url: http://b:8080\ntoken: abc\nadmin_token: xyz\n", "c.yaml");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->url, "http://b:8080");
  EXPECT_EQ(f->token, "abc");
  EXPECT_EQ(f->admin_token, "xyz");
  f = ParseConfigFile("", "c.yaml");
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE(f->url.has_value());
  f = ParseConfigFile("# only a comment\n", "c.yaml");
  ASSERT_TRUE(f.ok());
}

TEST(ClientConfigTest, ParseConfigFileRefusesUnknownKeysAndBadShapes) {
  auto f = ParseConfigFile("url: x\ntokn: y\n", "c.yaml");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("tokn"), std::string::npos);
  EXPECT_NE(f.status().message().find("c.yaml"), std::string::npos);
  EXPECT_FALSE(ParseConfigFile("- a\n- b\n", "c.yaml").ok());
  EXPECT_FALSE(ParseConfigFile("token: [1, 2]\n", "c.yaml").ok());
  EXPECT_FALSE(ParseConfigFile("url: [unclosed\n", "c.yaml").ok());
}

TEST(ClientConfigTest, ConfigPath) {
  EXPECT_EQ(FindConfigPath(FakeEnv({{"HOME", "/h"}}))->path, "/h/.config/kiln/config.yaml");
  EXPECT_EQ(FindConfigPath(FakeEnv({{"HOME", "/h"}, {"XDG_CONFIG_HOME", "/x"}}))->path,
            "/x/kiln/config.yaml");
  auto p = FindConfigPath(FakeEnv({{"HOME", "/h"}, {"KILN_CONFIG", "/c.yaml"}}));
  EXPECT_EQ(p->path, "/c.yaml");
  EXPECT_TRUE(p->required);
  EXPECT_FALSE(FindConfigPath(FakeEnv({})).has_value());
}

TEST(ClientConfigTest, LoadFromFile) {
  auto dir = std::filesystem::temp_directory_path() / ("kiln_cli_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir / ".config/kiln");
  std::ofstream(dir / ".config/kiln/config.yaml") << "url: http://cfg:9\ntoken: tok\n";
  auto env = FakeEnv({{"HOME", dir.string()}});
  auto c = LoadClientConfig({}, TokenRole::kTenant, env);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->url, "http://cfg:9");
  EXPECT_EQ(c->token, "tok");
  // A missing default file is fine; a missing $KILN_CONFIG is not.
  EXPECT_TRUE(LoadClientConfig({}, TokenRole::kNone, FakeEnv({{"HOME", "/nonexistent"}})).ok());
  EXPECT_FALSE(
      LoadClientConfig({}, TokenRole::kNone, FakeEnv({{"KILN_CONFIG", "/nonexistent.yaml"}})).ok());
  // A command that needs a token and finds none says where to put one.
  auto none = LoadClientConfig({}, TokenRole::kTenant, FakeEnv({{"HOME", "/nonexistent"}}));
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), common::Code::kUnauthorized);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln::cli
