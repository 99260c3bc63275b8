# The escape and abuse suite: hostile jobs through a real cluster (redis,
# broker, workers as processes), once per cgroup mode the host has.
# Included from tests/sandbox/CMakeLists.txt.
kiln_add_test(sandbox_escape_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/escape_test.cpp LIBS kiln_test_support LABELS sandbox TIMEOUT 900)
add_dependencies(sandbox_escape_test kiln-broker kiln-worker)
# It counts host processes per sandbox uid, and every TestCluster uses the
# same uid range: never alongside another cluster test.
set_tests_properties(sandbox_escape_test PROPERTIES RUN_SERIAL TRUE)
