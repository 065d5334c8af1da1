#!/usr/bin/env bash
# The install test (install_test.sh) for a configuration other than the one being built: configures
# the source into WORK_DIR with OPTIONS, builds the library only (no program, tests or benchmarks)
# and runs install_test.sh on it. WORK_DIR is kept, so a second run rebuilds nothing.
# Usage: config_test.sh CMAKE WORK_DIR SOURCE_DIR GENERATOR C_COMPILER CXX_COMPILER
#                       [OPTIONS...] -- [CONSUMER_ARGS...]
set -euo pipefail
cmake=$1 work=$2 source=$3 generator=$4 cc=$5 cxx=$6
shift 6
options=()
while (($#)) && [[ $1 != -- ]]; do options+=("$1"); shift; done
(($#)) && shift  # the --
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work"
log=$work/config_test.log
if ! { "$cmake" -S "$source" -B "$work" -G "$generator" -DCMAKE_BUILD_TYPE=Release \
         -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" -DLINGBOT_TESTS=OFF \
         -DLINGBOT_BENCH=OFF -DLINGBOT_PYTHON=OFF "${options[@]}" &&
       "$cmake" --build "$work" --target lingbot; } >"$log" 2>&1; then
  cat "$log"
  echo "config_test: building the library with ${options[*]} failed" >&2
  exit 1
fi
grep '^-- lingbot:' "$log" || true
INSTALL_COMPONENT=lingbot_dev exec bash "$here/install_test.sh" "$cmake" "$work" "$source" \
  "$generator" "$cc" "$cxx" "$@"
