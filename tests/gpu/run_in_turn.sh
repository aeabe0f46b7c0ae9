#!/usr/bin/env bash
# Runs GPU test files one after another on the device machine, each under its own time limit, within one call's
# budget; each file's pytest output goes to $OUT/<file>.log (or ./gpu-logs) and a line per file to stdout.
# pytest is stopped with SIGINT, so a file cut short still prints its failures and summary.
#
#   bash tests/gpu/run_in_turn.sh BUDGET_S FILE:LIMIT_S [FILE:LIMIT_S ...]
#   e.g. bash tests/gpu/run_in_turn.sh 560 tests/gpu/test_ray_gpu.py:240 tests/gpu/test_gpu_timing.py:90
set -u
if [ $# -lt 2 ]; then
  echo "usage: $0 BUDGET_S FILE:LIMIT_S [FILE:LIMIT_S ...]" >&2
  exit 2
fi
budget=$1
shift
logs=${OUT:-gpu-logs}
mkdir -p "$logs"
start=$(date +%s)
failed=0
for spec in "$@"; do
  file=${spec%%:*}
  limit=${spec##*:}
  left=$((budget - ($(date +%s) - start)))
  if [ "$left" -lt 60 ]; then
    echo "== $file skipped: less than 60 s of the budget left"
    failed=1
    continue
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  name=$(basename "$file" .py)
  t0=$(date +%s)
  timeout -s INT -k 15 "$limit" python3 -m pytest -m gpu -rfE -q -p no:cacheprovider "$file" >"$logs/$name.log" 2>&1
  rc=$?
  [ "$rc" -ne 0 ] && failed=1
  echo "== $file rc=$rc $(($(date +%s) - t0)) s: $(tail -n 1 "$logs/$name.log")"
done
exit $failed
