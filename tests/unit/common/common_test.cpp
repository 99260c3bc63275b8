#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "common/base64.hpp"
#include "common/clock.hpp"
#include "common/status.hpp"

namespace kiln::common {
namespace {

TEST(Status, CodesMapToApiNamesAndHttpStatuses) {
  EXPECT_EQ(CodeName(Code::kQueueFull), "QUEUE_FULL");
  EXPECT_EQ(HttpStatusFor(Code::kQueueFull), 429);
  EXPECT_EQ(HttpStatusFor(Code::kUnauthorized), 401);
  EXPECT_EQ(HttpStatusFor(Code::kInvalidRequest), 400);
  EXPECT_EQ(HttpStatusFor(Code::kLimitExceeded), 400);
  EXPECT_EQ(HttpStatusFor(Code::kUnavailable), 503);
  EXPECT_TRUE(IsRetryable(Code::kQueueFull));
  EXPECT_FALSE(IsRetryable(Code::kInvalidRequest));
  Status s = InvalidRequest("bad").WithContext("parsing");
  EXPECT_EQ(s.message(), "parsing: bad");
  EXPECT_EQ(s.ToString(), "INVALID_REQUEST: parsing: bad");
}

StatusOr<int> Half(int x) {
  if (x % 2) return InvalidRequest("odd");
  return x / 2;
}
StatusOr<int> Quarter(int x) {
  ASSIGN_OR_RETURN(int h, Half(x));
  ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

TEST(Status, MacrosPropagate) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(6).status().message(), "odd");
}

TEST(Base64, RoundTripsAllLengthsAndRejectsGarbage) {
  std::string bytes;
  for (int i = 0; i < 300; ++i) {
    auto back = Base64Decode(Base64Encode(bytes));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, bytes);
    bytes.push_back(static_cast<char>(i * 7));
  }
  EXPECT_EQ(Base64Encode("abc"), "YWJj");
  EXPECT_EQ(Base64Encode("ab"), "YWI=");
  EXPECT_EQ(*Base64Decode("YQ=="), "a");
  EXPECT_FALSE(Base64Decode("YQ=").ok());
  EXPECT_FALSE(Base64Decode("Y Q==").ok());
  EXPECT_FALSE(Base64Decode("Y=Q=").ok());
  EXPECT_FALSE(Base64Decode("@@@@").ok());
}

TEST(Ids, AreUniqueAndPrefixed) {
  std::set<std::string> ids;
  for (int i = 0; i < 10000; ++i) ids.insert(NewId("ex_"));
  EXPECT_EQ(ids.size(), 10000u);
  EXPECT_THAT(*ids.begin(), ::testing::MatchesRegex("ex_[0-9a-z]{20}"));
}

}  // namespace
}  // namespace kiln::common
