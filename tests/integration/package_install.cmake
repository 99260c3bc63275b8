# Packages on request (pip and npm from a package index the test serves on
# loopback), through a real cluster (issue: runtime environments).
kiln_add_test(package_install_test SOURCES package_install_test.cpp
  LIBS kiln_test_support LABELS integration TIMEOUT 300)
add_dependencies(package_install_test kiln-broker kiln-worker kiln-init kiln-zygote)
