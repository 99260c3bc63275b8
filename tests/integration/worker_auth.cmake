# The worker endpoint against hostile peers: CURVE keys, registration bound
# to the key's worker id, revocation, results and output only from the job's
# worker, and no unauthenticated endpoint beyond loopback.
kiln_add_test(worker_auth_test SOURCES worker_auth_test.cpp
  LIBS kiln_test_support cppzmq LABELS integration TIMEOUT 180)
add_dependencies(worker_auth_test kiln-broker kiln-worker)
