# The package sets every sandbox sees (python's Debian packages, the
# javascript tree at /node_modules) and the zygote's preloads, through a real
# cluster (issue: runtime environments).
kiln_add_test(packages_test SOURCES packages_test.cpp
  LIBS kiln_test_support LABELS integration TIMEOUT 300)
add_dependencies(packages_test kiln-broker kiln-worker kiln-init kiln-zygote)
