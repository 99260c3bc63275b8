# Chaos tests against a real cluster (included from tests/integration/CMakeLists.txt).
kiln_add_test(chaos_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/chaos_test.cpp LIBS kiln_test_support LABELS integration TIMEOUT 600)
add_dependencies(chaos_test kiln-broker kiln-worker)
# All test clusters share one sandbox uid range.
set_tests_properties(chaos_test PROPERTIES RUN_SERIAL TRUE)
