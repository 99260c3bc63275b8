// SpecCache (pure logic): a spec put is taken once; the oldest go first when
// the entries or the bytes exceed the bounds; ids taken long ago do not
// pile up behind an old entry nobody takes.
#include "broker/scheduler/spec_cache.hpp"

#include <gtest/gtest.h>

#include <string>

namespace kiln::broker {
namespace {

JobSpec Spec(const std::string& id, size_t code_bytes = 10) {
  JobSpec s;
  s.id = id;
  s.tenant = "t";
  s.language = "python";
  s.code = std::string(code_bytes, 'x');
  return s;
}

TEST(SpecCache, APutSpecIsTakenOnce) {
  SpecCache cache;
  cache.Put(Spec("a", 5));
  cache.Put(Spec("b"));
  EXPECT_EQ(cache.size(), 2u);
  auto a = cache.Take("a");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->id, "a");
  EXPECT_EQ(a->code, "xxxxx");
  EXPECT_FALSE(cache.Take("a").has_value());
  EXPECT_FALSE(cache.Take("never").has_value());
  EXPECT_EQ(cache.size(), 1u);
  ASSERT_TRUE(cache.Take("b").has_value());
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.bytes(), 0u);
}

TEST(SpecCache, TheOldestGoFirstPastTheEntryBound) {
  SpecCache cache;
  for (size_t i = 0; i < SpecCache::kMaxEntries + 3; ++i) cache.Put(Spec(std::to_string(i)));
  EXPECT_EQ(cache.size(), SpecCache::kMaxEntries);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(cache.Take(std::to_string(i)).has_value()) << i;
  EXPECT_TRUE(cache.Take("3").has_value());
  EXPECT_TRUE(cache.Take(std::to_string(SpecCache::kMaxEntries + 2)).has_value());
}

TEST(SpecCache, TheOldestGoFirstPastTheByteBound) {
  SpecCache cache;
  const size_t big = SpecCache::kMaxBytes / 4;
  for (int i = 0; i < 5; ++i) cache.Put(Spec("big" + std::to_string(i), big));
  EXPECT_LE(cache.bytes(), SpecCache::kMaxBytes);
  EXPECT_FALSE(cache.Take("big0").has_value());
  EXPECT_TRUE(cache.Take("big4").has_value());
  cache.Put(Spec("huge", SpecCache::kMaxBytes + 1));  // never kept
  EXPECT_FALSE(cache.Take("huge").has_value());
}

// A spec of little code and tools' schemas at their limits (32 x 32 KiB)
// counts the schemas: a tenant's queue of such jobs cannot pin more than
// kMaxBytes here.
TEST(SpecCache, ToolSchemasCountTowardsTheByteBound) {
  SpecCache cache;
  for (int i = 0; i < 64; ++i) {
    JobSpec s = Spec("tools" + std::to_string(i));
    for (int t = 0; t < 32; ++t) {
      s.tools.push_back({"tool" + std::to_string(t), "", std::string(32 << 10, 'x')});
    }
    cache.Put(std::move(s));
  }
  EXPECT_GE(cache.bytes(), cache.size() * (32u << 15));
  EXPECT_LE(cache.bytes(), SpecCache::kMaxBytes);
  EXPECT_LT(cache.size(), 64u);
  EXPECT_FALSE(cache.Take("tools0").has_value());
  EXPECT_TRUE(cache.Take("tools63").has_value());
}

TEST(SpecCache, AnOldEntryNobodyTakesStaysWhileOthersComeAndGo) {
  SpecCache cache;
  cache.Put(Spec("old"));
  for (size_t i = 0; i < 10 * SpecCache::kMaxEntries; ++i) {
    const std::string id = "j" + std::to_string(i);
    cache.Put(Spec(id));
    ASSERT_TRUE(cache.Take(id).has_value()) << i;
  }
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_TRUE(cache.Take("old").has_value());
}

}  // namespace
}  // namespace kiln::broker
