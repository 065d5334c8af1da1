#!/usr/bin/env bash
# A tarball of the Boost headers the network layer needs (src/net, src/serve, src/viewer), for a
# machine without Boost on which `serve` should still be built and measured (the GPU machine:
# tests/gpu/serve_check.sh takes it as BOOST_HEADERS). Made where libboost-dev is installed: the
# headers the compiler reads for those sources (-M), plus the whole directories of the libraries
# among them, since another compiler's feature checks may take other paths through them.
# Usage, from the repository root: scripts/boost_headers.sh [OUT.tar.xz]
set -eu
out=${1:-boost-headers.tar.xz}
case "$out" in /*) ;; *) out=$PWD/$out ;; esac
root=$(dirname "$(echo '#include <boost/version.hpp>' | ${CXX:-g++} -x c++ -M - 2>/dev/null |
  awk '{ for (i = 1; i <= NF; i++) print $i }' | grep -m1 '/boost/version.hpp$')")
[ -d "$root" ] || { echo "boost_headers: no Boost headers found (apt-get install libboost-dev)" >&2; exit 1; }
include=$(dirname "$root")
list=$(mktemp)
trap 'rm -f "$list" "$list.files"' EXIT
for f in src/net/*.cpp src/serve/*.cpp src/viewer/*.cpp; do
  ${CXX:-g++} -std=c++20 -M -MG -Isrc -Iinclude -DLINGBOT_HAVE_SERVER=1 -DLINGBOT_HAVE_VIEWER=1 "$f"
done | awk '{ for (i = 1; i <= NF; i++) print $i }' | grep "^$root/" | sort -u >"$list.files"
[ -s "$list.files" ] || { echo "boost_headers: the sources include no Boost header" >&2; exit 1; }
{
  sed "s#^$include/##" "$list.files"
  # Whole libraries: every directory boost/<lib> the sources reach.
  sed "s#^$root/##" "$list.files" | grep / | cut -d/ -f1 | sort -u |
    while read -r lib; do (cd "$include" && find "boost/$lib" -type f); done
} | sort -u >"$list"
tar -cJf "$out" -C "$include" -T "$list"
echo "$out: $(wc -l <"$list") headers, $(du -h "$out" | cut -f1)"
