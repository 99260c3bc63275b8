// Redis keys are spelled once (broker/store/redis_keys.hpp): every script
// takes them from the table K, and the table names each key exactly once.
#include "broker/store/redis_keys.hpp"

#include <gtest/gtest.h>

#include <cctype>
#include <set>
#include <string>

#include "broker/store/list_scripts.hpp"
#include "broker/store/output_scripts.hpp"
#include "broker/store/schedule_scripts.hpp"
#include "broker/store/webhook_scripts.hpp"

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
      &scripts::ListSessions(), &scripts::DeleteSession(), &scripts::AppendOutput(),
      &scripts::ListJobs(),     &scripts::ClaimWebhooks()};
  std::set<std::string> names;
  for (const auto& [name, key] : keys::kLuaNames) names.insert(name);
  for (const RedisScript* s : all) {
    ASSERT_TRUE(s->text.starts_with(table)) << s->text.substr(0, 200);
    const std::string body = s->text.substr(table.size());
    const size_t spelled = body.find("{kiln}");
    EXPECT_EQ(spelled, std::string::npos) << "a script spells a key itself:\n"
                                          << body.substr(spelled < 80 ? 0 : spelled - 80, 200);
    // Every K.name a script uses is in the table (a typo would be nil at run time).
    int uses = 0;
    for (size_t at = body.find("K."); at != std::string::npos; at = body.find("K.", at + 2)) {
      size_t end = at + 2;
      while (end < body.size() &&
             (std::islower(static_cast<unsigned char>(body[end])) || body[end] == '_')) {
        ++end;
      }
      const std::string name = body.substr(at + 2, end - at - 2);
      EXPECT_TRUE(names.count(name)) << "K." << name << " is not a key";
      ++uses;
    }
    EXPECT_GT(uses, 0) << "a script that uses no key: " << body.substr(0, 200);
  }
}

}  // namespace
}  // namespace kiln::broker
