# Scheduling across brokers: the 3x3 load test and its smaller companions.
# Serial: the load test uses all the machine's cores on its own.
kiln_add_test(scheduling_test SOURCES scheduling_test.cpp
  LIBS kiln_test_support LABELS integration TIMEOUT 600)
add_dependencies(scheduling_test kiln-broker kiln-worker)
set_tests_properties(scheduling_test PROPERTIES RUN_SERIAL TRUE)
