# until_within.sh: sourced by the daemon tests' scripts.
# until_within SECONDS COMMAND...: runs COMMAND every 50 ms until it succeeds (status 0) or
# SECONDS pass (status 1). Bounded by time, not by a count of polls: a poll that starts
# processes is slow on a loaded machine, and a count of them once ran out before a job attached.
until_within() {
  deadline=$(( $(date +%s) + $1 )); shift
  while [ "$(date +%s)" -le "$deadline" ]; do
    "$@" && return 0
    sleep 0.05
  done
  return 1
}
