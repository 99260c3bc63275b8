# Runtimes: one-shot wrappers, session drivers and their worker-side codec. The
# programs are real files, embedded into the binary at configure time (re-run
# when they change).
set(_kiln_rt_dir ${CMAKE_CURRENT_LIST_DIR})
set(_kiln_rt_generated ${CMAKE_BINARY_DIR}/generated/worker/runtimes/wrappers.cpp)
foreach(_kiln_rt_pair "PYTHON_ONESHOT;python_oneshot.py" "JAVASCRIPT_ONESHOT;javascript_oneshot.js"
                      "SHELL_ONESHOT;shell_oneshot.sh" "PYTHON_SESSION;python_session.py"
                      "JAVASCRIPT_SESSION;javascript_session.js" "SHELL_SESSION;shell_session.sh"
                      "PYTHON_ZYGOTE;python_zygote.py")
  list(GET _kiln_rt_pair 0 _kiln_rt_var)
  list(GET _kiln_rt_pair 1 _kiln_rt_file)
  file(READ ${_kiln_rt_dir}/wrappers/${_kiln_rt_file} KILN_${_kiln_rt_var})
  string(FIND "${KILN_${_kiln_rt_var}}" ")kiln_wrapper\"" _kiln_rt_clash)
  if(NOT _kiln_rt_clash EQUAL -1)
    message(FATAL_ERROR "${_kiln_rt_file} contains the raw-string delimiter )kiln_wrapper\"")
  endif()
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
               ${_kiln_rt_dir}/wrappers/${_kiln_rt_file})
endforeach()
# The wrappers' shared parts, each put where a wrapper has its include line:
# "<file>|<the line, as written>|<wrappers>" (| keeps the line out of the list).
foreach(_kiln_rt_inc
    "javascript_packages.js|  // kiln-include: javascript_packages.js|JAVASCRIPT_ONESHOT JAVASCRIPT_SESSION"
    "javascript_tools.js|  // kiln-include: javascript_tools.js|JAVASCRIPT_ONESHOT JAVASCRIPT_SESSION"
    "python_tools.py|# kiln-include: python_tools.py|PYTHON_ONESHOT PYTHON_SESSION"
    "shell_tools.sh|# kiln-include: shell_tools.sh|SHELL_ONESHOT SHELL_SESSION")
  string(REPLACE "|" ";" _kiln_rt_inc "${_kiln_rt_inc}")
  list(GET _kiln_rt_inc 0 _kiln_rt_file)
  list(GET _kiln_rt_inc 1 _kiln_rt_line)
  list(GET _kiln_rt_inc 2 _kiln_rt_vars)
  file(READ ${_kiln_rt_dir}/wrappers/${_kiln_rt_file} _kiln_rt_text)
  string(FIND "${_kiln_rt_text}" ")kiln_wrapper\"" _kiln_rt_clash)
  if(NOT _kiln_rt_clash EQUAL -1)
    message(FATAL_ERROR "${_kiln_rt_file} contains the raw-string delimiter )kiln_wrapper\"")
  endif()
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
               ${_kiln_rt_dir}/wrappers/${_kiln_rt_file})
  separate_arguments(_kiln_rt_vars)
  foreach(_kiln_rt_var ${_kiln_rt_vars})
    set(_kiln_rt_before "${KILN_${_kiln_rt_var}}")
    string(REPLACE "${_kiln_rt_line}\n" "${_kiln_rt_text}"
           KILN_${_kiln_rt_var} "${KILN_${_kiln_rt_var}}")
    if("${_kiln_rt_before}" STREQUAL "${KILN_${_kiln_rt_var}}")
      message(FATAL_ERROR "${_kiln_rt_var}: no `${_kiln_rt_line}` line")
    endif()
  endforeach()
endforeach()
configure_file(${_kiln_rt_dir}/wrappers.cpp.in ${_kiln_rt_generated} @ONLY)

set(KILN_RUNTIMES_SOURCES
  ${_kiln_rt_dir}/runtime.cpp
  ${_kiln_rt_dir}/python_imports.cpp
  ${_kiln_rt_dir}/inventory.cpp
  ${_kiln_rt_generated}
)
