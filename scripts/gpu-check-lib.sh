# shellcheck shell=bash disable=SC2154
# gpu-check-lib.sh (sourced by scripts/gpu-check.sh): running a step with a time limit that
# kills everything it started, judging a check by its exit status, the summary, and the
# --dry walk (every step printed with its command and pass criteria, nothing run).
#
# Uses the caller's: out, dry (1 for --dry), TOTAL_LIMIT_S, start_s, reserve_s (seconds kept
# for the PyTorch steps while earlier steps run), rows, notes, facts, passes, failures, skips,
# reports.

remaining() { echo $(( TOTAL_LIMIT_S - (SECONDS - start_s) )); }

# The pids of session SID's processes. A step runs in a session of its own (setsid), and
# setpgid keeps the session: `capuchin run` moves the job to a process group of its own and
# torchrun its workers to theirs, but all stay in the step's session.
session_pids() { ps -e -o pid=,sid= | awk -v s="$1" '$2 == s {print $1}'; }

# kill_session SID: TERM, then KILL, to whatever of that session is still alive, so nothing is
# left on the GPU for the next step (or the next user of the machine).
kill_session() {
  local sid=$1 pids sig
  [ -n "$sid" ] || return 0
  [ "$sid" = "$(ps -o sid= -p $$ | tr -d ' ')" ] && return 0  # never our own session
  for sig in TERM KILL; do
    pids=$(session_pids "$sid" | tr '\n' ' ')
    [ -z "${pids// /}" ] && return 0
    echo "[gpu-check] session $sid still has processes ($pids): SIG$sig"
    # shellcheck disable=SC2086
    kill -s "$sig" $pids 2>/dev/null
    sleep 2
  done
}

# Prints a command line, each word quoted only where it needs to be.
show_cmd() {
  local w line=""
  for w in "$@"; do
    if [[ $w =~ ^[A-Za-z0-9_./:=,@+-]+$ ]]; then line+="$w "; else line+="$(printf '%q' "$w") "; fi
  done
  echo "${line% }"
}

# step NAME LIMIT_S LOG cmd...: runs cmd in a session of its own under `timeout` (its limit,
# or what is left of the total minus reserve_s and 15 s for the summary), output to LOG; on
# return (done or timed out) whatever the session still holds is killed. Returns cmd's
# status, 124/137 on timeout, 125 when no time is left. --dry: prints the command only.
step() {
  local name=$1 limit=$2 log=$3; shift 3
  if [ "$dry" = 1 ]; then
    if [ "$1" = bash ] && [ "$2" = -c ]; then echo "    run:   $3"; else echo "    run:   $(show_cmd "$@")"; fi
    echo "    limit: $limit s, output in $(basename "$log")"
    return 0
  fi
  local left=$(( $(remaining) - 15 - reserve_s ))
  if [ "$left" -le 5 ]; then echo "out of time before: $name" >"$log"; return 125; fi
  [ "$limit" -gt "$left" ] && limit=$left
  local t0=$SECONDS sidfile="$out/.sid.$$.$RANDOM"
  # shellcheck disable=SC2016
  timeout --kill-after=5 "$limit" setsid --wait bash -c 'echo $$ >"$0"; exec "$@"' "$sidfile" "$@" >"$log" 2>&1
  local rc=$?
  kill_session "$(cat "$sidfile" 2>/dev/null)" >>"$log" 2>&1
  rm -f "$sidfile"
  echo "  $name: exit $rc in $((SECONDS - t0)) s (limit $limit s)"
  return $rc
}

record() {  # record CHECK STATUS DETAIL LOG
  rows+=("| $1 | $2 | $3 | $(basename "$4") |")
  case $2 in
    PASS) passes=$((passes + 1)) ;;
    SKIP*) skips=$((skips + 1)) ;;
    REPORT*) reports=$((reports + 1)) ;;
    *) failures=$((failures + 1)) ;;
  esac
  echo "$2 $1: $3"
}

# check NAME LIMIT_S LOG CRITERIA cmd...: one check, judged on its own by cmd's exit status:
# 0 PASS, 77 SKIP, 78 SKIP (driver too old), 3 REPORT (a finding, not a failure), 124/137
# FAIL (timeout), 125 NOT RUN (out of time), anything else FAIL. The detail: the log's FAIL or
# SKIP lines, else its last PASS/RESULT/INFO lines. --dry: prints the command and CRITERIA.
check() {
  local name=$1 limit=$2 log=$3 criteria=$4; shift 4
  if [ "$dry" = 1 ]; then
    echo "  check $name"
    step "$name" "$limit" "$log" "$@"
    echo "    PASS when: $criteria"
    return 0
  fi
  step "$name" "$limit" "$log" "$@"
  local rc=$? detail
  detail=$(grep -E '^(FAIL|SKIP)' "$log" | head -2 | cut -c1-200 | tr '|' '/' | tr '\n' ' ')
  # else the verdict's own summary line (RESULT NAME STATUS: detail), else the last PASS/INFO lines
  [ -z "$detail" ] && detail=$(grep -E '^RESULT [^ ]+ [A-Z]+: ' "$log" | tail -1 | cut -c1-300 | tr '|' '/')
  [ -z "$detail" ] && detail=$(grep -E '^(PASS|INFO)' "$log" | grep -v '^INFO gpu' | tail -2 | cut -c1-200 |
                               tr '|' '/' | tr '\n' ' ')
  case $rc in
    0) record "$name" PASS "$detail" "$log" ;;
    77) record "$name" SKIP "$detail" "$log" ;;
    78) record "$name" "SKIP (driver too old)" "$detail" "$log" ;;
    3) record "$name" "REPORT" "$detail" "$log" ;;
    124|137) record "$name" "FAIL (timeout)" "$detail" "$log" ;;
    125) record "$name" "NOT RUN (out of time)" "" "$log" ;;
    *) record "$name" FAIL "exit $rc: $detail" "$log" ;;
  esac
}

# dry_note TEXT: in --dry, a line about what the real run decides at that point.
dry_note() { [ "$dry" = 1 ] && echo "  ($*)"; return 0; }

write_summary() {
  {
    echo "# capuchin GPU check"
    echo
    echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(hostname); commit $(git rev-parse --short HEAD 2>/dev/null || echo '?');" \
         "$((SECONDS - start_s)) s of the ${TOTAL_LIMIT_S} s limit."
    echo
    echo "**$1**"
    echo
    echo "## Machine"
    echo
    for f in "${facts[@]}"; do echo "- $f"; done
    echo "- capuchin: $cap_from"
    echo "- GPU programs: ${gpu_from:-none}"
    for n in "${notes[@]}"; do echo "$n"; done
    if [ ${#rows[@]} -gt 0 ]; then
      echo
      echo "## Checks"
      echo
      echo "| check | result | detail | log |"
      echo "| --- | --- | --- | --- |"
      for r in "${rows[@]}"; do echo "$r"; done
    fi
    for part in launch.md bandwidth.md calls.md torch.md; do
      [ -s "$out/$part" ] && { echo; cat "$out/$part"; }
    done
  } >"$summary"
  echo "== summary: $summary"
}
