#!/bin/sh
# bench/python/dcp_bench.py (libckpt against DCP's FileSystemWriter and torch.save), in a
# tiny mode (8 MiB state, 1 run, 1 and 2 gloo ranks) on the torch 2.x virtual environment
# (tests/python/common.sh, use_torch2; skips without it): it runs, every load it makes holds the
# saved state bit for bit (the bench exits non-zero otherwise), results.json gets every dcp_* key of
# every method and world, merged (other keys kept, a stale dcp_* key replaced), libckpt's
# 5%-changed saves put fewer bytes on the disk than its full ones while DCP's rewrite everything,
# and bench/summary.py shows the goal rows from it.
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/python/common.sh
use_torch2
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
echo '{"full_save_gbps": 1.5, "dcp_stale_key": 7}' > "$W/results.json"
if ! BENCH_DCP_SIZE=8M BENCH_RUNS=1 BENCH_DCP_WORLDS="1 2" BENCH_DCP_WARMUP=0 BENCH_DIR="$W/work" \
	BENCH_DCP_OUT="$W/results.json" BENCH_DCP_TIMEOUT=240 "$PY" bench/python/dcp_bench.py > "$W/out" 2>&1; then
	tail -n 40 "$W/out"
	echo "FAIL: dcp_bench.py exited non-zero"
	exit 1
fi
grep -v '^\[Gloo\]' "$W/out" | tail -n 24
"$PY" - "$W/results.json" <<'PYEOF' || exit 1
import json, sys
r = json.load(open(sys.argv[1]))
bad = []
if r.get("full_save_gbps") != 1.5:
    bad.append("a key of another bench was not kept")
if "dcp_stale_key" in r:
    bad.append("a stale dcp_* key was kept")
want = {
    "torch": ["durable_seconds", "incr5_durable_seconds", "load_seconds", "bytes", "incr5_bytes"],
    "fs_save": ["durable_seconds", "incr5_durable_seconds", "load_seconds", "bytes", "incr5_bytes"],
    "fs_async": ["blocked_seconds", "durable_seconds", "incr5_blocked_seconds",
                 "incr5_durable_seconds", "bytes", "incr5_bytes"],
    "ckpt_save": ["durable_seconds", "incr5_durable_seconds", "load_seconds", "bytes",
                  "incr5_bytes", "bytes_written", "incr5_bytes_written"],
    "ckpt_async": ["blocked_seconds", "durable_seconds", "incr5_blocked_seconds",
                   "incr5_durable_seconds", "bytes", "incr5_bytes", "bytes_written",
                   "incr5_bytes_written"],
    "ckptdcp_save": ["durable_seconds", "incr5_durable_seconds", "load_seconds", "bytes",
                     "incr5_bytes", "bytes_written", "incr5_bytes_written"],
    "ckptdcp_async": ["blocked_seconds", "durable_seconds", "incr5_blocked_seconds",
                      "incr5_durable_seconds", "bytes", "incr5_bytes", "bytes_written",
                      "incr5_bytes_written"],
}
ratios = ["blocked_vs_async", "durable_vs_save", "incr5_vs_save", "backend_blocked_vs_async",
          "backend_durable_vs_save", "backend_incr5_vs_save", "async_durable_vs_async",
          "load_vs_dcp", "backend_load_vs_dcp", "blocked_vs_copy_floor",
          "backend_blocked_vs_copy_floor", "incr5_vs_hash_floor", "backend_incr5_vs_hash_floor"]
for n in (1, 2):
    for m, ks in want.items():
        for k in ks:
            v = r.get(f"dcp_{m}_{k}_{n}")
            if not isinstance(v, (int, float)) or v <= 0:
                bad.append(f"dcp_{m}_{k}_{n} is {v!r}")
    for k in ("floor_copy_seconds", "floor_hash_seconds"):
        v = r.get(f"dcp_{k}_{n}")
        if not isinstance(v, float) or v <= 0:
            bad.append(f"dcp_{k}_{n} is {v!r}")
    for k in ratios:
        if not isinstance(r.get(f"dcp_{k}_{n}"), float):
            bad.append(f"no ratio dcp_{k}_{n}")
    for m in ("ckpt_save", "ckpt_async", "ckptdcp_save", "ckptdcp_async"):
        full, chg = r.get(f"dcp_{m}_bytes_{n}", 0), r.get(f"dcp_{m}_incr5_bytes_{n}", 0)
        wfull, wchg = (r.get(f"dcp_{m}_bytes_written_{n}", 0),
                       r.get(f"dcp_{m}_incr5_bytes_written_{n}", 0))
        # 1 of the 8 1 MiB blocks changed: libckpt writes that chunk (and its manifest), not all
        if not (0 < chg < full / 2 and 0 < wchg < wfull / 2):
            bad.append(f"{m}, {n} ranks: the 5%-changed save put {chg} bytes on the disk "
                       f"({wchg} written), the full one {full} ({wfull})")
    for m in ("fs_save", "fs_async", "torch"):
        full, chg = r.get(f"dcp_{m}_bytes_{n}", 0), r.get(f"dcp_{m}_incr5_bytes_{n}", 0)
        if not chg >= 0.99 * full > 0:
            bad.append(f"{m}, {n} ranks: the 5%-changed save put {chg} bytes, the full one {full}")
for k in ("dcp_state_bytes", "dcp_runs", "dcp_load_avg_start", "dcp_bench_time",
          "dcp_incr5_changed_blocks", "dcp_samples_1", "dcp_samples_2"):
    if k not in r:
        bad.append(f"no {k}")
if r.get("dcp_state_bytes") != 8 << 20 or r.get("dcp_incr5_changed_blocks") != 1:
    bad.append(f"state {r.get('dcp_state_bytes')} bytes, {r.get('dcp_incr5_changed_blocks')} "
               f"blocks changed; expected 8 MiB and 1")
if bad:
    print("FAIL: results.json:\n  " + "\n  ".join(bad))
    sys.exit(1)
print("results.json: every dcp_* key of 7 methods on 1 and 2 ranks; libckpt's 5%%-changed "
      "saves wrote %d of %d bytes (1 rank, Store.save)" % (r["dcp_ckpt_save_incr5_bytes_1"],
                                                          r["dcp_ckpt_save_bytes_1"]))
PYEOF
python3 bench/summary.py "$W/results.json" > "$W/summary" || { cat "$W/summary"; echo "FAIL: summary.py"; exit 1; }
for row in "DCP own blocked N=1" "DCP own durable N=1" "DCP own 5% chg N=1" "DCP backend blocked N=1" \
	"DCP backend durable N=1" "DCP backend 5% chg N=1"; do
	if ! grep "^$row " "$W/summary" | grep -Eq ' (PASS|MISS)$'; then
		cat "$W/summary"
		echo "FAIL: summary.py has no figure on the row '$row'"
		exit 1
	fi
done
grep -q '^DCP own blocked N=4 .*NOT RUN$' "$W/summary" || { cat "$W/summary"; echo "FAIL: N=4 was not run but the summary shows a figure"; exit 1; }
grep '^DCP ' "$W/summary"
echo "PASS"
