# Grafana dashboards, Prometheus alert rules and deploy files (included from
# tests/integration/CMakeLists.txt). dashboards_test checks them statically and
# against a real Prometheus scraping a real cluster; the promtool tests check
# the rules' syntax, run their unit tests and check the scrape config.
kiln_add_test(dashboards_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/dashboards_test.cpp
  LIBS kiln_test_support kiln_broker_lib kiln_worker_lib LABELS integration TIMEOUT 300)
# kiln: DeployFilesTest runs deploy/k8s/make-keys.sh with it.
add_dependencies(dashboards_test kiln-broker kiln-worker kiln)

# promtool comes with the Debian package prometheus (deploy/install-deps.sh).
find_program(KILN_PROMTOOL promtool)
if(NOT KILN_PROMTOOL)
  message(WARNING "promtool not found (Debian package prometheus): the dashboards_promtool_* tests will fail")
  set(KILN_PROMTOOL promtool)
endif()
set(_kiln_prom_dir ${PROJECT_SOURCE_DIR}/deploy/prometheus)
add_test(NAME dashboards_promtool_check_rules
  COMMAND ${KILN_PROMTOOL} check rules ${_kiln_prom_dir}/alerts.yml)
add_test(NAME dashboards_promtool_test_rules
  COMMAND ${KILN_PROMTOOL} test rules ${_kiln_prom_dir}/alerts_test.yml)
add_test(NAME dashboards_promtool_check_config
  COMMAND ${KILN_PROMTOOL} check config ${_kiln_prom_dir}/prometheus.yml)
set_tests_properties(dashboards_promtool_check_rules dashboards_promtool_test_rules
  dashboards_promtool_check_config PROPERTIES LABELS unit TIMEOUT 60)

# The systemd units: `systemd-analyze verify` (skipped where systemd is absent).
add_test(NAME deploy_systemd_verify
  COMMAND ${CMAKE_CURRENT_LIST_DIR}/verify_systemd_units.sh ${PROJECT_SOURCE_DIR}
          ${PROJECT_BINARY_DIR}/bin)
set_tests_properties(deploy_systemd_verify PROPERTIES LABELS unit TIMEOUT 60 SKIP_RETURN_CODE 77)
