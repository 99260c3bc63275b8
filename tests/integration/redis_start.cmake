# Brokers and workers started while Redis loads its dataset or is not there
# yet, and Redis restarting under a running broker, with real processes
# (included from tests/integration/CMakeLists.txt).
kiln_add_test(redis_start_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/redis_start_test.cpp
  LIBS kiln_test_support LABELS integration TIMEOUT 120)
add_dependencies(redis_start_test kiln-broker kiln-worker)
