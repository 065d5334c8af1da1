#!/usr/bin/env bash
# The demo's time from a fresh machine (README, docs/perf-log/cpu.md "The demo's build"): a
# minimal Debian 12 root, this repository cloned into it, then scripts/demo.sh inside it (its
# apt-get, the build, the demo), timed. Run as root on a Debian/Ubuntu host with debootstrap.
#   tests/build/fresh_demo_time.sh [ROOT]   (default: a new folder under /tmp)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
root=${1:-$(mktemp -d /tmp/lingbot-fresh.XXXXXX)}
debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >"$root.debootstrap.log"
mount -t proc proc "$root/proc"
mount --bind /dev "$root/dev"
trap 'umount "$root/proc" "$root/dev"' EXIT
cp /etc/resolv.conf "$root/etc/resolv.conf"
chroot "$root" apt-get update -qq
git clone -q "$repo" "$root/root/lingbot-map"
t0=$(date +%s.%N)
chroot "$root" bash -c "cd /root/lingbot-map && scripts/demo.sh" >"$root.demo.log" 2>&1
t1=$(date +%s.%N)
echo "fresh Debian 12 to the demo's result: $(echo "$t1 - $t0" | bc) s (log: $root.demo.log)"
