#include "common/metrics/metrics_common.hpp"

#include <prometheus/gauge.h>

namespace kiln::common {

const prometheus::Histogram::BucketBoundaries& SecondsBuckets() {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600};
  return kBuckets;
}

void RegisterBuildInfo(prometheus::Registry& registry) {
  prometheus::BuildGauge()
      .Name("kiln_build_info")
      .Help("Always 1; the version label says which build runs")
      .Register(registry)
      .Add({{"version", KILN_VERSION}})
      .Set(1);
}

}  // namespace kiln::common
