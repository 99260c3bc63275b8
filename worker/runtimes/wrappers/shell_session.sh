# Kiln shell session driver (docs/runtimes.md, "Session drivers"). Started as
#   bash --noprofile --norc -c <this text> bash
# and kept alive: every execution is `eval`ed in this one shell, so cd,
# export, variables, functions and options persist.
# fd 0: execution frames, one after another:  <N> "\n" <N bytes>, the bytes being
#       <header line> "\n" <code> "."  (the one-shot frame; no NUL bytes). EOF: exit 0.
#       A header starting `__kiln_stdin=<N>;`: the N bytes before the code are
#       the execution's stdin: a file in /tmp, removed once open, on the code's
#       fd 0 (/dev/null again afterwards).
# fd 3: one control frame per execution:  <N> "\n" <N bytes of "<status>\n" ["r" <$result>]>
# fd 6: the tool channel, when the session has one: a unix stream socket to
#       the worker for `kiln-tool` (shell_tools.sh, defined here once and
#       exported; the code may redefine it); left open for the code and its
#       children, unlike fds 0 and 3.
# The driver's names start with __kiln; it owns the INT trap.
#
# SIGINT (the worker's timeout, sent to the whole process group) is ignored
# between executions (trap ''). While code runs, the trap `continue`s the
# outermost loop, i.e. this driver's: the rest of the code is abandoned (a
# foreground child got the SIGINT too) and the top of the loop reports 130.
trap '' INT
# kiln-include: shell_tools.sh
# Frames and the control pipe move to fds of their own (numbers in
# __kiln_in/__kiln_ctl), closed around the user's code, whose stdin is
# /dev/null and which has no fd 3.
exec {__kiln_in}<&0 {__kiln_ctl}>&3 3>&-
if [[ -e /dev/null ]]; then exec </dev/null; fi
# Reads one frame into __kiln_head/__kiln_code: 0, or 1 at EOF, 2 if malformed.
# Byte semantics (LC_ALL=C): N counts bytes; read -N reads no further than N.
__kiln_next() {
  local LC_ALL=C REPLY
  if ! IFS= builtin read -r -u "$__kiln_in" REPLY; then
    [[ -z $REPLY ]] && return 1
    return 2
  fi
  [[ $REPLY =~ ^[1-9][0-9]{0,14}$ ]] || return 2
  IFS= builtin read -r -N "$REPLY" -u "$__kiln_in" __kiln_code || return 2
  (( ${#__kiln_code} == REPLY )) || return 2
  __kiln_head=${__kiln_code%%$'\n'*}
  __kiln_code=${__kiln_code#*$'\n'}
  __kiln_code=${__kiln_code%.}
  unset __kiln_stdin
  if [[ $__kiln_head =~ ^__kiln_stdin=([1-9][0-9]*)\; ]]; then
    __kiln_stdin=${__kiln_code:0:BASH_REMATCH[1]}
    __kiln_code=${__kiln_code:BASH_REMATCH[1]}
    __kiln_head=${__kiln_head#*;}
  fi
}
# Writes the control frame for exit status $1 (and $result when it is set).
__kiln_frame() {
  local LC_ALL=C __kiln_body="$1"$'\n'
  [[ -v result ]] && __kiln_body+="r$result"
  builtin printf '%d\n%s' "${#__kiln_body}" "$__kiln_body" >&"$__kiln_ctl" || exit 1
}
__kiln_x=
# Two loops: a `break` or `continue` in the code's top level leaves the inner
# one (the code ends there, status 1); the outer one restarts it. `break 2`
# and more leave both: the session ends. Written so that the code's `set -e`,
# `set -u` or `set -x` cannot trip or trace the driver.
while :; do
  while :; do
    if [[ -v __kiln_running ]]; then  # the code did not come back: report why
      trap '' INT
      exec {__kiln_sfd}<&- || :
      if [[ $__kiln_running == int ]]; then
        __kiln_frame 130
      else
        builtin echo "kiln: break/continue outside a loop ended the code" >&2
        __kiln_frame 1
      fi
      unset __kiln_running
    fi
    __kiln_next && __kiln_st=0 || __kiln_st=$?
    if [[ $__kiln_st == 1 ]]; then exit 0; fi  # stdin closed: the session is over
    if [[ $__kiln_st != 0 ]]; then
      builtin echo "kiln session driver: malformed frame" >&2
      exit 2
    fi
    unset result || :
    eval "$__kiln_head" || :  # `export K=$'\xHH...'`: can only assign
    # The code's fd 0: the execution's stdin if it has one, else the driver's.
    exec {__kiln_sfd}<&0
    if [[ -v __kiln_stdin ]]; then
      if builtin printf '%s' "$__kiln_stdin" >"/tmp/.kiln-stdin-$$"; then
        exec {__kiln_sfd}<&- {__kiln_sfd}<"/tmp/.kiln-stdin-$$" || exec {__kiln_sfd}<&0
      fi
      command rm -f "/tmp/.kiln-stdin-$$" || :
      unset __kiln_stdin
    fi
    # $1 empties $@ for the code (and turns xtrace back on); $2 is the code,
    # on the same line, so its line k is the eval's line + k - 1 in messages.
    [[ $__kiln_x == *x* ]] && __kiln_st='shift 2;set -x;' || __kiln_st='shift 2;'
    set -- "$__kiln_st" "$__kiln_code"
    unset __kiln_head __kiln_code __kiln_st
    __kiln_running=1
    trap '__kiln_running=int; continue 2147483647' INT
    { eval "$1$2"; } <&"$__kiln_sfd" {__kiln_sfd}<&- {__kiln_in}<&- {__kiln_ctl}>&-
    { __kiln_st=$? __kiln_x=$-; set +x; } 2>&-
    exec {__kiln_sfd}<&- || :
    trap '' INT
    unset __kiln_running
    __kiln_frame "$__kiln_st"
  done
done
# Only `break 2` (or more) in the code's top level gets here.
builtin echo "kiln: break outside a loop ended the session" >&2
exit 1
