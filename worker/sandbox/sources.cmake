# Sandbox sources (included from worker/CMakeLists.txt).
set(KILN_SANDBOX_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/cgroup_pool.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cgroup_v1.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cgroup_v2.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cgroups.cpp
  ${CMAKE_CURRENT_LIST_DIR}/contain.cpp
  ${CMAKE_CURRENT_LIST_DIR}/credentials.cpp
  ${CMAKE_CURRENT_LIST_DIR}/fd_passing.cpp
  ${CMAKE_CURRENT_LIST_DIR}/fs_util.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gvisor_runsc.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gvisor_sandbox.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gvisor_spec.cpp
  ${CMAKE_CURRENT_LIST_DIR}/held_file.cpp
  ${CMAKE_CURRENT_LIST_DIR}/host_probe.cpp
  ${CMAKE_CURRENT_LIST_DIR}/init_reports.cpp
  ${CMAKE_CURRENT_LIST_DIR}/landlock.cpp
  ${CMAKE_CURRENT_LIST_DIR}/linux_sandbox.cpp
  ${CMAKE_CURRENT_LIST_DIR}/linux_sandbox_process.cpp
  ${CMAKE_CURRENT_LIST_DIR}/mounts.cpp
  ${CMAKE_CURRENT_LIST_DIR}/namespaces.cpp
  ${CMAKE_CURRENT_LIST_DIR}/netns_listener.cpp
  ${CMAKE_CURRENT_LIST_DIR}/package_mount.cpp
  ${CMAKE_CURRENT_LIST_DIR}/rlimits.cpp
  ${CMAKE_CURRENT_LIST_DIR}/seccomp_policy.cpp
  ${CMAKE_CURRENT_LIST_DIR}/uid_pool.cpp
  ${CMAKE_CURRENT_LIST_DIR}/violation_watcher.cpp
  ${CMAKE_CURRENT_LIST_DIR}/workspace.cpp
  ${CMAKE_CURRENT_LIST_DIR}/zygote.cpp
  ${CMAKE_CURRENT_LIST_DIR}/zygote_plan.cpp
)
# libkiln-zygote.so: loaded by a zygote's interpreter (zygote_child.cpp),
# never by the worker. The contain pipeline compiled a second time, for a
# shared object and without sanitizers (the interpreter is not sanitized).
set(KILN_ZYGOTE_LIBRARY_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/zygote_child.cpp
  ${CMAKE_CURRENT_LIST_DIR}/zygote_plan.cpp
  ${CMAKE_CURRENT_LIST_DIR}/contain.cpp
  ${CMAKE_CURRENT_LIST_DIR}/credentials.cpp
  ${CMAKE_CURRENT_LIST_DIR}/fs_util.cpp
  ${CMAKE_CURRENT_LIST_DIR}/landlock.cpp
  ${CMAKE_CURRENT_LIST_DIR}/mounts.cpp
  ${CMAKE_CURRENT_LIST_DIR}/namespaces.cpp
  ${CMAKE_CURRENT_LIST_DIR}/rlimits.cpp
  ${CMAKE_CURRENT_LIST_DIR}/seccomp_policy.cpp
)
