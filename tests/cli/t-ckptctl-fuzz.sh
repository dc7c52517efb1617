#!/usr/bin/env bash
# ckptctl import against damaged safetensors files: a few hundred deterministic mutations of
# valid files (bytes of the JSON header changed, dropped or inserted, the length field altered,
# the data cut). Each import must either succeed (and then export the same tensors back) or fail
# with exit 1 and a message naming the file; never crash, hang or exit otherwise.
. tests/cli/lib.sh

for k in names empty dtypes nometa model; do mkst "$k" "$T/$k.safetensors" 3; done
python3 - "$T" <<'PY' || exit 1
import os, random, sys
T = sys.argv[1]
random.seed(20261201)
src = [open(f"{T}/{k}.safetensors", "rb").read() for k in ("names", "empty", "dtypes", "nometa", "model")]
os.makedirs(f"{T}/fz")
for i in range(300):
    b = bytearray(random.choice(src))
    hl = int.from_bytes(b[:8], "little")
    for _ in range(random.randint(1, 3)):
        op = random.random()
        pos = random.randrange(8, 8 + hl)
        if op < 0.4:
            b[pos] = random.randrange(256)
        elif op < 0.6:
            b[pos] = ord(random.choice('{}[]",:0123456789-.eE\\u '))
        elif op < 0.75:
            del b[pos]
        elif op < 0.85:
            b.insert(pos, ord(random.choice('{}[]",:0123456789')))
        elif op < 0.93:
            b[0:8] = (hl + random.randint(-9, 9)).to_bytes(8, "little", signed=True)
        else:
            del b[random.randrange(8 + hl, len(b) + 1):]
    open(f"{T}/fz/{i:03d}.safetensors", "wb").write(bytes(b))
PY
ok=0 rejected=0
for f in "$T"/fz/*.safetensors; do
	cases=$((cases + 1))
	timeout 20 "$CK" import "$STORE" --step 1 --overwrite -q "$f" >"$T/.out" 2>"$T/.err"
	rc=$?
	if [ $rc = 0 ]; then
		ok=$((ok + 1))
		# Accepted: it must come back identical when its header was canonical, and at least
		# re-import cleanly otherwise.
		if ! "$CK" export "$STORE" 1 -q -o "$T/back.safetensors" ||
			! "$CK" import "$T/store2" --step 1 --overwrite -q "$T/back.safetensors"; then
			echo "FAIL $f: accepted, but its export does not import"
			failed=$((failed + 1))
		fi
	elif [ $rc = 1 ] && grep -q "^ckptctl: import: $f: " "$T/.err" && [ ! -s "$T/.out" ]; then
		rejected=$((rejected + 1))
	else
		echo "FAIL $f: exit $rc"
		cat "$T/.err"
		failed=$((failed + 1))
	fi
done
echo "$ok accepted, $rejected rejected"
finish
