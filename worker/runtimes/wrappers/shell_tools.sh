# Kiln's shell wrappers, tool callbacks (docs/runtimes.md, "Tool callbacks:
# the `kiln` helpers"): embedded at configure time (worker/runtimes/sources.cmake)
# into shell_oneshot.sh and shell_session.sh where they say
# `# kiln-include: shell_tools.sh`. Defines `kiln-tool NAME [JSON-ARGUMENTS]`:
# one call over fd 6, a SOCK_STREAM unix socket to the worker, one JSON line
# each way (docs/api.md, "Tool callbacks"). It prints the result's JSON, or
# `kiln-tool: <Type>: <message>` on stderr and exits 1 (ToolError),
# 2 (ToolRefused), 3 (ToolUnavailable) or 124 (ToolTimeout).
# Exported (bash accepts the dash: BASH_FUNC_kiln-tool%%), so that `bash -c`
# children have it; sh (dash) drops such a variable from its environment.
# One call at a time per process: a reply with an id of null (the worker
# could not read the request, e.g. JSON-ARGUMENTS that is not JSON) answers
# the call that waits; replies with other ids (a call given up by an
# interrupt) are skipped.
kiln-tool() {
  # Not traced, and the caller's set -e / -u do not apply inside.
  { local - LC_ALL=C; set +eux; } 2>/dev/null
  local args=${2:-'{}'} id line type message wait
  if (( $# < 1 || $# > 2 )); then
    builtin printf 'usage: kiln-tool NAME [JSON-ARGUMENTS]\n' >&2
    return 2
  fi
  # One line: raw line breaks become tabs, which keeps what JSON means (both
  # are blanks between tokens, and invalid inside strings).
  args=${args//$'\n'/$'\t'}
  args=${args//$'\r'/$'\t'}
  if [[ ! $1 =~ ^[A-Za-z_][A-Za-z0-9_-]{0,63}$ ]]; then
    type=ToolRefused message="invalid tool name \"$1\""
  elif (( ${#args} > 65536 )); then
    type=ToolRefused message="arguments of ${#args} bytes, above the maximum of 65536"
  else
    # Ids unique across the processes that share fd 6: the pid above 2^31 calls.
    __kiln_tool_calls=$(( ${__kiln_tool_calls:-0} + 1 ))
    id=$(( BASHPID * 2147483648 + __kiln_tool_calls ))
    # bash reads a socket byte by byte; on a non-blocking one (node makes its
    # fd 6 so) it needs -t, which waits with select() before each byte, about
    # 3x slower: only then.
    wait=(-t 2147483)
    while IFS=$' \t' builtin read -r line message; do
      if [[ $line == flags: ]]; then
        (( 8#$message & 8#4000 )) || wait=()
        break
      fi
    done 2>/dev/null </proc/self/fdinfo/6
    # The call runs in a subshell, which SIGPIPE (the worker gone) or SIGINT
    # ends without ending this shell, and whose status says which: 4 the
    # channel closed, 130 interrupted (in a session, the trap that abandons
    # the code cannot act inside a function: the code goes on after a 130).
    line=$(
      exec 2>/dev/null
      builtin printf '{"id":%s,"name":"%s","arguments":%s}\n' "$id" "$1" "$args" >&6 || exit 3
      while IFS= builtin read -r "${wait[@]}" -u 6 line; do
        case $line in
          ("{\"id\":$id,"* | '{"id":null,'*) builtin printf '%s' "$line"; exit 0 ;;
        esac
      done
      exit 4
    )
    case $? in
      0) ;;
      4) type=ToolUnavailable message="the tool channel closed" ;;
      130) return 130 ;;
      *) type=ToolUnavailable message="no tool channel (fd 6 cannot be written)" ;;
    esac
    if [[ $line == "{\"id\":$id,\"result\":"* ]]; then
      line=${line#"{\"id\":$id,\"result\":"}
      builtin printf '%s\n' "${line%\}}"
      return 0
    elif [[ -n $line ]]; then
      line=${line#*\"type\":\"}
      type=${line%%\"*}
      message=${line#*\"message\":\"}
      message=${message%\"\}\}}
      # The message is a JSON string: \" and \/ by hand, the other escapes
      # (\\ \n \t \uXXXX ...) by printf's %b.
      message=${message//'\"'/\"}
      message=${message//'\/'//}
    fi
  fi
  case $type in
    ToolRefused) set -- 2 ;;
    ToolUnavailable) set -- 3 ;;
    ToolTimeout) set -- 124 ;;
    *) type=ToolError; set -- 1 ;;
  esac
  builtin printf 'kiln-tool: %s: %b\n' "$type" "$message" >&2
  return "$1"
}
export -f kiln-tool
