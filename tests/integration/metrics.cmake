# Prometheus metrics of a real cluster (included from tests/integration/CMakeLists.txt).
kiln_add_test(metrics_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/metrics_test.cpp
  LIBS kiln_test_support LABELS integration TIMEOUT 300)
add_dependencies(metrics_test kiln-broker kiln-worker)
