#!/usr/bin/env bash
# A switch measured in one binary: builds lingbot-map and the tests, then runs `bench` with the
# switch off and on alternating (378x504 twice, 378x518 once). The switch is an environment
# variable set to 0 and 1, or a `bench` option (`--name`) given the two values in VALUES (e.g.
# VALUES="auto fp8" with --precision). The shared first half of tests/gpu/gemm_tune_check.sh and
# tests/gpu/pdl_check.sh. Usage, from the repository root on a GPU machine:
#   [VALUES="a b"] tests/gpu/switch_bench.sh <variable or --option> <output folder>
set -u
VAR=${1:?the switch, e.g. LINGBOT_PDL or --precision}
OUT=${2:?an output folder}
read -r -a VALS <<<"${VALUES:-0 1}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader
t0=$(date +%s)
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINGBOT_BENCH=OFF &&
  ninja -C build lingbot-map lingbot_tests; } >"$OUT/build.log" 2>&1 ||
  { grep -E "error|Error" -A3 "$OUT/build.log" | head -40; exit 1; }
echo "build $(($(date +%s) - t0)) s"
bench() {
  if [[ $VAR == --* ]]; then
    timeout 120 build/lingbot-map bench --device cuda "$VAR" "$1" "${@:2}"
  else
    env "$VAR=$1" timeout 120 build/lingbot-map bench --device cuda "${@:2}"
  fi 2>&1 | grep -E "^streaming" | cut -c1-40
}
for r in 1 2; do
  for v in "${VALS[@]}"; do printf "378x504, round %s, %s=%s: " "$r" "$VAR" "$v"; bench "$v"; done
done
for v in "${VALS[@]}"; do printf "378x518, %s=%s: " "$VAR" "$v"; bench "$v" --width 518; done
