// LatencySummary: order statistics of a set of samples, as kiln-bench reports them.
//
//   LatencySummary s = Summarize({3.0, 1.0, 2.0});
//   printf("p50 %.1f p99 %.1f\n", s.p50, s.p99);
//
// Pure functions on plain values; any thread.
#pragma once

#include <cstddef>
#include <vector>

namespace kiln::bench {

// The p-th percentile (0 <= p <= 100) of `sorted` (ascending) by the
// nearest-rank method: the smallest sample such that at least p% of the
// samples are <= it. p == 0 gives the minimum. An empty input gives 0.
double Percentile(const std::vector<double>& sorted, double p);

struct LatencySummary {
  std::size_t count = 0;
  double min = 0, mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
};

// Sorts a copy of `samples` and summarizes it; all zero when empty.
LatencySummary Summarize(std::vector<double> samples);

}  // namespace kiln::bench
