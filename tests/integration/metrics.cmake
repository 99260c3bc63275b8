# Prometheus metrics of a real cluster (included from tests/integration/CMakeLists.txt).
kiln_add_test(metrics_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/metrics_test.cpp
  LIBS kiln_test_support LABELS integration TIMEOUT 300)
add_dependencies(metrics_test kiln-broker kiln-worker)

# Structured JSON logs of a real cluster, and per-subsystem levels.
kiln_add_test(structured_logs_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/structured_logs_test.cpp
  LIBS kiln_test_support LABELS integration TIMEOUT 300)
add_dependencies(structured_logs_test kiln-broker kiln-worker)
