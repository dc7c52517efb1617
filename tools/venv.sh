#!/bin/sh
# Makes or refreshes the Python virtual environment that a tools/deps.d/NAME.SET.venv file lists
# (pip requirement lines), for Debian's /usr/bin/python3, outside the source tree so that every
# worktree and every later run reuses it. Says what it installs; does nothing (and needs no network)
# when the environment exists and was made from the same requirements (a stamp holds their hash).
# Usage: tools/venv.sh FILE.venv
# Where: $LIBCKPT_TORCH_VENV for torch2.*.venv, else $LIBCKPT_VENV_ROOT/NAME
# (default root: ${XDG_CACHE_HOME:-$HOME/.cache}/libckpt, so torch2 -> .../libckpt/torch2-venv).
set -eu
req=$1
name=$(basename "$req"); name=${name%%.*}
root=${LIBCKPT_VENV_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/libckpt}
case $name in
  torch2) dir=${LIBCKPT_TORCH_VENV:-$root/torch2-venv} ;;
  *) dir=$root/$name-venv ;;
esac
py=/usr/bin/python3
want=$(grep -v '^[[:space:]]*#' "$req" | grep -v '^[[:space:]]*$' | sort)
hash=$(printf '%s\n' "$want" | sha256sum | cut -d' ' -f1)
stamp=$dir/.libckpt-requirements
if [ -x "$dir/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$hash" ]; then
  exit 0
fi
if [ ! -x "$py" ]; then
  echo "venv: $py is missing (apt-get install python3 python3-venv)" >&2; exit 1
fi
echo "venv: installing into $dir (from $req):" $want
start=$(date +%s)
if [ ! -x "$dir/bin/python" ]; then
  mkdir -p "$(dirname "$dir")"
  "$py" -m venv "$dir"
fi
# The stamp goes only after pip succeeded: an interrupted install is redone by the next run.
rm -f "$stamp"
# --no-cache-dir: the wheels (about 4 GB for torch and its CUDA runtime) would otherwise be kept a
# second time in pip's cache. Not --quiet: the install takes minutes, and pip's lines (one per
# package collected, downloaded, installed) show that it is going on; the download bars only on
# a terminal (in a log they are thousands of lines).
bar=off
if [ -t 1 ]; then bar=on; fi
echo "venv: pip install -r $req (torch and its CUDA wheels: about 4 GB to download, minutes)"
"$dir/bin/python" -m pip install --progress-bar "$bar" --no-cache-dir -r "$req"
printf '%s\n' "$hash" >"$stamp"
echo "venv: $dir ready in $(( $(date +%s) - start )) s"
