#!/usr/bin/env bash
# Power-cut test: the nvmetune QEMU guest (Debian's kernel, emulated NVMe; tests/crash/
# powercut-lib.sh) records every write and flush of saves, prunes and gcs on ext4 with
# dm-log-writes, then replays the log to flush points and checks, at each, that every checkpoint
# reported committed is intact (tests/crash/powercut-guest.sh). `make check` checks every 6th
# flush point and every point where a commit was reported; `make check-crash`
# (CKPT_CRASH_LONG=1) checks every flush point.
# Exit: 0 pass, 1 fail, 77 skip (tools missing, or the kernel package cannot be fetched).
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/crash/powercut-lib.sh
pc_setup
python3 - "$R/data" <<'PY'
import json, random, struct, sys
# Five checkpoints that share most chunks (an embedding that never changes, layers that do).
for step in range(1, 6):
    rnd = random.Random(step)
    ts = [("embed", "F32", [256, 1024], random.Random(0)), ("l0", "BF16", [512, 1024], rnd),
          ("l1", "BF16", [512, 1024], random.Random(step // 2)), ("norm", "F32", [1024], rnd)]
    hdr, blobs, off = {"__metadata__": {"step": str(step)}}, [], 0
    for name, dt, shape, r in ts:
        n = {"F32": 4, "BF16": 2}[dt]
        for d in shape: n *= d
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + n]}
        blobs.append(r.randbytes(n)); off += n
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(f"{sys.argv[1]}/m{step}.st", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PY
pc_boot tests/crash/powercut-guest.sh
fail=0
pc_verdict_setup
pc_verdict_replay "power cut" 8 "3 4 5"
exit $fail
