# Opt-in, approval, policy rules and the audit chain through a real cluster.
kiln_add_test(governance_test SOURCES governance_test.cpp
  LIBS kiln_test_support LABELS integration TIMEOUT 300)
add_dependencies(governance_test kiln-broker kiln-worker kiln)
