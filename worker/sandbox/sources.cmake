# Sandbox sources (included from worker/CMakeLists.txt).
set(KILN_SANDBOX_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/cgroup_v1.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cgroup_v2.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cgroups.cpp
  ${CMAKE_CURRENT_LIST_DIR}/contain.cpp
  ${CMAKE_CURRENT_LIST_DIR}/credentials.cpp
  ${CMAKE_CURRENT_LIST_DIR}/fs_util.cpp
  ${CMAKE_CURRENT_LIST_DIR}/host_probe.cpp
  ${CMAKE_CURRENT_LIST_DIR}/landlock.cpp
  ${CMAKE_CURRENT_LIST_DIR}/linux_sandbox.cpp
  ${CMAKE_CURRENT_LIST_DIR}/mounts.cpp
  ${CMAKE_CURRENT_LIST_DIR}/namespaces.cpp
  ${CMAKE_CURRENT_LIST_DIR}/rlimits.cpp
  ${CMAKE_CURRENT_LIST_DIR}/seccomp_policy.cpp
  ${CMAKE_CURRENT_LIST_DIR}/violation_watcher.cpp
  ${CMAKE_CURRENT_LIST_DIR}/workspace.cpp
)
