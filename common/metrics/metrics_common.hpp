// What the broker's and the worker's Prometheus metrics share: the histogram
// buckets for durations and the build_info gauge.
//
//   BuildHistogram().Name("kiln_x_seconds").Register(r).Add({}, common::SecondsBuckets());
//   common::RegisterBuildInfo(r);
//
// Any thread.
#pragma once

#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace kiln::common {

// 1 ms to 10 min: sandboxed jobs range from trivial to long.
const prometheus::Histogram::BucketBoundaries& SecondsBuckets();
// kiln_build_info{version="..."} 1.
void RegisterBuildInfo(prometheus::Registry& registry);

}  // namespace kiln::common
