#include "tests/bench/latency_stats.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace kiln::bench {
namespace {

TEST(PercentileTest, EmptyIsZero) {
  EXPECT_EQ(Percentile({}, 50), 0);
  LatencySummary s = Summarize({});
  EXPECT_EQ(s.count, 0u);
  EXPECT_EQ(s.max, 0);
}

TEST(PercentileTest, SingleSampleIsEveryPercentile) {
  for (double p : {0.0, 1.0, 50.0, 99.0, 100.0}) EXPECT_EQ(Percentile({7.5}, p), 7.5) << p;
}

TEST(PercentileTest, NearestRankOnOneToHundred) {
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  EXPECT_EQ(Percentile(v, 0), 1);
  EXPECT_EQ(Percentile(v, 1), 1);
  EXPECT_EQ(Percentile(v, 50), 50);
  EXPECT_EQ(Percentile(v, 90), 90);
  EXPECT_EQ(Percentile(v, 99), 99);
  EXPECT_EQ(Percentile(v, 99.5), 100);
  EXPECT_EQ(Percentile(v, 100), 100);
}

TEST(PercentileTest, SmallSetsRoundUp) {
  // n = 4: p50 -> rank 2, p90 -> rank ceil(3.6) = 4, p26 -> rank ceil(1.04) = 2.
  std::vector<double> v{10, 20, 30, 40};
  EXPECT_EQ(Percentile(v, 50), 20);
  EXPECT_EQ(Percentile(v, 90), 40);
  EXPECT_EQ(Percentile(v, 26), 20);
  EXPECT_EQ(Percentile(v, 25), 10);
}

TEST(PercentileTest, OutOfRangeIsClamped) {
  std::vector<double> v{1, 2, 3};
  EXPECT_EQ(Percentile(v, -5), 1);
  EXPECT_EQ(Percentile(v, 250), 3);
}

TEST(SummarizeTest, SortsAndIgnoresInputOrder) {
  std::vector<double> v;
  for (int i = 1; i <= 1000; ++i) v.push_back(i);
  std::shuffle(v.begin(), v.end(), std::mt19937(42));
  LatencySummary s = Summarize(v);
  EXPECT_EQ(s.count, 1000u);
  EXPECT_EQ(s.min, 1);
  EXPECT_EQ(s.max, 1000);
  EXPECT_DOUBLE_EQ(s.mean, 500.5);
  EXPECT_EQ(s.p50, 500);
  EXPECT_EQ(s.p90, 900);
  EXPECT_EQ(s.p99, 990);
}

TEST(SummarizeTest, OneOutlierMovesMaxNotMedian) {
  std::vector<double> v(99, 2.0);
  v.push_back(500.0);
  LatencySummary s = Summarize(v);
  EXPECT_EQ(s.p50, 2.0);
  EXPECT_EQ(s.p99, 2.0);
  EXPECT_EQ(s.max, 500.0);
}

}  // namespace
}  // namespace kiln::bench
