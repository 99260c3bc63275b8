# Hostile clients through a real cluster: submit validation, collect
# truncation, bounded excerpts of blocked submits, the submit rate limit.
kiln_add_test(hostile_clients_test SOURCES hostile_clients_test.cpp
  LIBS kiln_test_support LABELS integration TIMEOUT 300)
add_dependencies(hostile_clients_test kiln-broker kiln-worker)
