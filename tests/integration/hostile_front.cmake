# Hostile clients at the broker's front doors (HTTP and native) through a
# real cluster per attack: nested input, slowloris, caps on waits, streams
# and requests, huge bodies, subscribers and streams that do not read, HTTP
# edges, connection floods, forged and flooded log lines.
kiln_add_test(hostile_front_test SOURCES hostile_front_test.cpp
  LIBS kiln_test_support cppzmq LABELS integration TIMEOUT 300)
add_dependencies(hostile_front_test kiln-broker kiln-worker)
