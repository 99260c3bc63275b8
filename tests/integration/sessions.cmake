# Persistent sessions through a real cluster (issue: sessions and streaming).
kiln_add_test(sessions_test SOURCES sessions_test.cpp
  LIBS kiln_test_support LABELS integration TIMEOUT 300)
add_dependencies(sessions_test kiln-broker kiln-worker)
