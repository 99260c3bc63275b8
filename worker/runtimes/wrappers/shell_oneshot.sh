# Kiln one-shot shell wrapper (docs/runtimes.md). Started warm, before the job
# is known, as:  bash --noprofile --norc -c <this text> bash
# fd 0: the job frame  <header line> "\n" <code> "."   (no NUL bytes anywhere)
#       header: empty, or `export K=$'\xHH...' ...` built by the worker, every
#       byte of every value escaped, so evaluating it can only assign variables;
#       with a job's stdin it starts with `__kiln_stdin=<N>;` and the N bytes of
#       stdin come before the code; the wrapper puts them on fd 0 (a file in
#       /tmp, removed once open).
# fd 3: control pipe; at the end it gets "<exit status>\n", then "r<bytes of $result>"
#       when `result` is set. `exit` in the user's code ends the shell: no frame.
# fd 6: the tool channel, when the execution has one: a unix stream socket to
#       the worker for `kiln-tool` (shell_tools.sh, defined below and exported;
#       it counts its calls in __kiln_tool_calls); left open for the code and
#       its children, unlike fd 3.
# kiln-include: shell_tools.sh
# Read everything in one go: `$(<file)` reads in blocks, `read -d ''` byte by byte.
if [[ -e /dev/stdin ]]; then __kiln=$(</dev/stdin); else IFS= read -r -d '' __kiln; fi
# stdin closed without a job: the warm sandbox is being retired.
[[ -n $__kiln ]] || exit 0
# fd 0 is now a pipe at EOF, i.e. an empty stdin for the user's code.
# Split with byte semantics (LC_ALL=C): in a UTF-8 locale bash is ~10x slower
# on big frames. The code goes to $1, the header to $2: no variable name is
# reserved for the wrapper.
LC_ALL=C
set -- "${__kiln#*$'\n'}"
set -- "${1%.}" "${__kiln%%$'\n'*}"
unset __kiln
# stdin: $3, cut from the front of the code by its byte count.
if [[ $2 =~ ^__kiln_stdin=([1-9][0-9]*)\; ]]; then
  set -- "${1:BASH_REMATCH[1]}" "${2#*;}" "${1:0:BASH_REMATCH[1]}"
fi
unset LC_ALL
eval "$2"
if (( $# == 3 )); then
  if builtin printf '%s' "$3" >"/tmp/.kiln-stdin-$$"; then
    exec <"/tmp/.kiln-stdin-$$"
  fi
  command rm -f "/tmp/.kiln-stdin-$$"
  set -- "$1" "$2"
fi
# `shift 2` first empties $@ for the user's code; fd 3 is closed around it.
{ eval "shift 2;$1"; } 3>&-
set -- "$?"
# Let go of stdout/stderr first: once fds 1, 2 and 3 reach EOF the worker has
# the whole job.
exec 1>/dev/null 2>&1
if [[ -v result ]]; then
  builtin printf '%s\nr%s' "$1" "$result" >&3
else
  builtin printf '%s\n' "$1" >&3
fi
exec 3>&-
exit "$1"
