#!/usr/bin/env bash
# Installs the build into a temporary prefix, then configures, builds and runs a separate
# project (consumer/) against it through find_package(lingbot), as a user would.
# Usage: install_test.sh CMAKE BUILD_DIR SOURCE_DIR GENERATOR C_COMPILER CXX_COMPILER [ARGS...]
# (ARGS go to the consumer's configure step.)
set -euo pipefail
cmake=$1 build=$2 source=$3 generator=$4 cc=$5 cxx=$6
shift 6
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/lingbot_install.XXXXXX")
trap 'rm -rf "$work"' EXIT

run() {  # a step's output only when it fails
  if ! "$@" >"$work/step.log" 2>&1; then
    cat "$work/step.log"
    echo "install_test: failed: $*" >&2
    exit 1
  fi
}

# INSTALL_COMPONENT=lingbot_dev: the library, headers and package only (a build of the library
# alone, as config_test.sh makes, has no program to install).
component=()
[[ -n ${INSTALL_COMPONENT:-} ]] && component=(--component "$INSTALL_COMPONENT")
run "$cmake" --install "$build" --prefix "$work/prefix" "${component[@]}"
config=$(find "$work/prefix" -name lingbotConfig.cmake)
[[ -n $config ]] || { echo "install_test: no lingbotConfig.cmake installed" >&2; exit 1; }
for f in lingbotConfigVersion.cmake lingbotTargets.cmake; do
  [[ -f $(dirname "$config")/$f ]] || { echo "install_test: no $f installed" >&2; exit 1; }
done
[[ -f $work/prefix/include/lingbot/engine.h && -f $work/prefix/include/lingbot/lingbot_c.h ]] ||
  { echo "install_test: public headers not installed" >&2; exit 1; }
# A component's header is installed exactly when the library implements it.
for part in viewer:VIEWER server:SERVER; do
  header=$work/prefix/include/lingbot/${part%%:*}.h
  if grep -q "set(lingbot_WITH_${part#*:} ON)" "$config"; then
    [[ -f $header ]] || { echo "install_test: ${header##*/} not installed" >&2; exit 1; }
  elif [[ -e $header ]]; then
    echo "install_test: ${header##*/} installed, but its component was not built" >&2
    exit 1
  fi
done
# The package must stand on its own: nothing in it may point back into the source or build tree.
if grep -rlF -e "$source" -e "$(cd "$build" && pwd)" "$(dirname "$config")"; then
  echo "install_test: the installed package names the source or build tree" >&2
  exit 1
fi

run "$cmake" -S "$here/consumer" -B "$work/consumer" -G "$generator" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$work/prefix" "$@"
run "$cmake" --build "$work/consumer"
"$work/consumer/consumer"
echo "install_test: passed"
