#!/usr/bin/env bash
# A 0/1 environment switch measured in one binary: builds lingbot-map and the tests, then runs
# `bench` with the switch off and on alternating (378x504 twice, 378x518 once). Usage, from the
# repository root on a GPU machine: tests/gpu/switch_bench.sh <variable> <output folder>
set -u
VAR=${1:?the switch, e.g. LINGBOT_PDL}
OUT=${2:?an output folder}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader
t0=$(date +%s)
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINGBOT_BENCH=OFF &&
  ninja -C build lingbot-map lingbot_tests; } >"$OUT/build.log" 2>&1 ||
  { grep -E "error|Error" -A3 "$OUT/build.log" | head -40; exit 1; }
echo "build $(($(date +%s) - t0)) s"
bench() { env "$VAR=$1" timeout 120 build/lingbot-map bench --device cuda "${@:2}" 2>&1 | grep -E "^streaming" | cut -c1-40; }
for r in 1 2; do
  for v in 0 1; do printf "378x504, round %s, %s=%s: " "$r" "$VAR" "$v"; bench "$v"; done
done
for v in 0 1; do printf "378x518, %s=%s: " "$VAR" "$v"; bench "$v" --width 518; done
