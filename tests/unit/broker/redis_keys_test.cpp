// Redis keys are spelled once (broker/store/redis_keys.hpp): every script
// takes them from the table K, and the table names each key exactly once.
#include "broker/store/redis_keys.hpp"

#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <string>

#include "broker/store/output_scripts.hpp"
#include "broker/store/schedule_scripts.hpp"

namespace kiln::broker {
namespace {

TEST(RedisKeys, EveryKeyHasTheHashTagAndOneLuaName) {
  std::set<std::string> names, values;
  for (const auto& [name, key] : keys::kLuaNames) {
    EXPECT_TRUE(std::string_view(key).starts_with(keys::kTag)) << key;
    EXPECT_TRUE(names.insert(name).second) << "two keys named " << name;
    EXPECT_TRUE(values.insert(key).second) << "two names for " << key;
  }
  EXPECT_EQ(keys::Job("ex_1"), "{kiln}:job:ex_1");
  EXPECT_EQ(keys::Output("ex_1"), "{kiln}:out:ex_1");
}

TEST(RedisKeys, ScriptsUseTheTableAndSpellNoKeyThemselves) {
  const std::string table = keys::LuaKeyTable();
  const RedisScript* all[] = {
      &scripts::Submit(),       &scripts::Finish(),        &scripts::Requeue(),
      &scripts::Approve(),      &scripts::Pump(),          &scripts::Tick(),
      &scripts::Claim(),        &scripts::LoseWorker(),    &scripts::Load(),
      &scripts::ListSessions(), &scripts::DeleteSession(), &scripts::AppendOutput()};
  const std::regex used(R"(K\.([a-z_]+))");
  std::set<std::string> names;
  for (const auto& [name, key] : keys::kLuaNames) names.insert(name);
  for (const RedisScript* s : all) {
    ASSERT_TRUE(s->text.starts_with(table)) << s->text.substr(0, 200);
    const std::string body = s->text.substr(table.size());
    const size_t spelled = body.find("{kiln}");
    EXPECT_EQ(spelled, std::string::npos) << "a script spells a key itself:\n"
                                          << body.substr(spelled < 80 ? 0 : spelled - 80, 200);
    // Every K.name a script uses is in the table (a typo would be nil at run time).
    for (std::sregex_iterator it(body.begin(), body.end(), used), end; it != end; ++it) {
      EXPECT_TRUE(names.count((*it)[1].str())) << "K." << (*it)[1].str() << " is not a key";
    }
  }
}

}  // namespace
}  // namespace kiln::broker
