# The kiln CLI run as a user runs it, against a real cluster
# (included from tests/integration/CMakeLists.txt).
kiln_add_test(cli_integration_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/cli_test.cpp
  LIBS kiln_test_support LABELS integration TIMEOUT 600)
add_dependencies(cli_integration_test kiln-broker kiln-worker kiln)
