# The native ZeroMQ client protocol through a real cluster (a cppzmq DEALER).
kiln_add_test(native_test SOURCES native_test.cpp
  LIBS kiln_test_support cppzmq LABELS integration TIMEOUT 400)
add_dependencies(native_test kiln-broker kiln-worker)
