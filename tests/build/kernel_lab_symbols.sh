#!/usr/bin/env bash
# A release build of the CUDA backend instantiates only the kernels it runs: no diagnostic variant
# of the kernel lab (bench/lab/, -DLINGBOT_KERNEL_LAB=ON) may be in the library. Lists the wgmma
# attention kernel's instantiations in LIBRARY with nm and fails on any mode but the default
# (68, enum Mode's kDefault) and the default on e4m3 K/V (196, kDefault | kF8), or on none.
# Usage: kernel_lab_symbols.sh NM LIBRARY
set -euo pipefail
nm=$1 lib=$2
modes=$("$nm" -C "$lib" | grep -o 'attention_wgmma_kernel<lingbot::cuda::attn::(anonymous namespace)::Cfg<[0-9, ]*>, [0-9]*>' |
        sed 's/.*, \([0-9]*\)>$/\1/' | sort -un | tr '\n' ' ')
echo "kernel_lab_symbols: attention_wgmma_kernel modes in ${lib##*/}: ${modes:-none}"
[[ -n $modes ]] || { echo "kernel_lab_symbols: no attention kernel found (symbol names changed?)" >&2; exit 1; }
for m in $modes; do
  if [[ $m != 68 && $m != 196 ]]; then
    echo "kernel_lab_symbols: mode $m is a kernel-lab variant in a release build" >&2
    exit 1
  fi
done
