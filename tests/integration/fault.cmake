# Fault injection through a real cluster (issue 12): Redis, brokers and
# workers paused and killed under a mixed load with output floods, and the
# targeted tests of hostile control frames, floods and one-byte writes
# (included from tests/integration/CMakeLists.txt). `ctest -L fault`.
kiln_add_test(fault_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/fault_test.cpp
  LIBS kiln_test_support LABELS integration fault TIMEOUT 600)
add_dependencies(fault_test kiln-broker kiln-worker)
# Pauses and kills processes and loads both cores: alone.
set_tests_properties(fault_test PROPERTIES RUN_SERIAL TRUE)
