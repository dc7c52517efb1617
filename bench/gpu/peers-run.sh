#!/usr/bin/env bash
# libckpt against its peers on CUDA tensors, on a lent GPU machine (CUDA driver and torch, no
# package manager, no network): bench/python/peers_bench.py's one-process section with the state
# on device 0 (BENCH_PEERS_CUDA=1): DeepSpeed's FastPersist (where the machine's Python has
# deepspeed and can build its async_io op; else its row says "not run" with the error),
# torch.save, dcp.save, dcp.async_save with FileSystemWriter's staging and with DefaultStager
# (pinned and shared memory, async staging, non-blocking copies: every option on), against
# Store.save and Store.save_async: blocked and durable time, loads checked bit for bit, host peak
# memory; then the goal lines. `make gpu-bundle-peers` installs it as peers.sh at the top of the
# bundle (beside run.sh, whose 8 minutes it does not share): run it as `peers.sh OUTDIR`.
# It stops itself within PEERS_BUDGET_S (default 240 s: a 1 GiB state, one run, 7 processes).
# Environment: PEERS_CUDA_SIZE (default 1G), PEERS_RUNS (default 1), PYTHON (default python3),
# CKPT_CUDART (as run.sh).
# Exits 77 (skip) without a Python whose torch has CUDA, 1 on a failure (a load that differs).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:?usage: peers.sh OUTDIR}
mkdir -p "$OUT/work" || exit 1
OUT=$(cd "$OUT" && pwd)
PY=${PYTHON:-python3}
if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
	echo "peers.sh: skip: $PY has no torch with CUDA" | tee "$OUT/peers-summary.txt"
	exit 77
fi
export LD_LIBRARY_PATH=$HERE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
. "$HERE/cudart-dirs.sh"
for d in ${CKPT_CUDART:-} $(cudart_dirs "$PY"); do
	if ls "$d"/libcudart.so.1[23] >/dev/null 2>&1; then
		export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
		break
	fi
done
export CKPT_CUDA_MODULE=$HERE/lib/libckpt-cuda.so.0 CKPT_LIBRARY=$HERE/lib/libckpt.so.0
timeout --kill-after=10 "${PEERS_BUDGET_S:-240}" env BENCH_PEERS_CUDA=1 BENCH_PEERS_SECTIONS=file \
	BENCH_PEERS_SIZES="${PEERS_CUDA_SIZE:-1G}" BENCH_RUNS="${PEERS_RUNS:-1}" BENCH_DIR="$OUT/work" \
	BENCH_PEERS_OUT="$OUT/peers-results.json" BENCH_PEERS_TIMEOUT=200 PYTHONPATH="$HERE/python" \
	"$PY" "$HERE/bench/python/peers_bench.py" 2>&1 | tee "$OUT/peers.log"
rc=${PIPESTATUS[0]}
rm -rf "$OUT/work"
{
	echo "peers.sh: exit $rc ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1))"
	grep -E '^(PASS|MISS|NOT RUN) ' "$OUT/peers.log"
} | tee "$OUT/peers-summary.txt"
exit "$rc"
