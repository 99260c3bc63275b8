# stdin and rich outputs (figures, a session's echoed last expression) through
# a real cluster (issue 17, "Rich results").
kiln_add_test(rich_results_test SOURCES rich_results_test.cpp
  LIBS kiln_test_support LABELS integration TIMEOUT 300)
add_dependencies(rich_results_test kiln-broker kiln-worker)
