#!/usr/bin/env python3
"""Damages store files for the ckptctl tests.

  corrupt.py flip FILE [OFFSET]           flips every bit of the byte at OFFSET (default: middle)
  corrupt.py truncate FILE SIZE           cuts FILE to SIZE bytes ("half" for half its size)
  corrupt.py flip-tensor STORE ST TENSOR  finds the data of TENSOR (from the safetensors file ST)
                                          in STORE/packs/* and flips one byte of it; prints the
                                          pack file's path relative to STORE
"""
import glob
import json
import os
import struct
import sys


def flip(path, off):
    with open(path, "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0xFF]))


def main():
    op = sys.argv[1]
    if op == "flip":
        path = sys.argv[2]
        off = int(sys.argv[3]) if len(sys.argv) > 3 else os.path.getsize(path) // 2
        flip(path, off)
    elif op == "truncate":
        path, size = sys.argv[2], sys.argv[3]
        n = os.path.getsize(path) // 2 if size == "half" else int(size)
        os.truncate(path, n)
    elif op == "flip-tensor":
        store, st, name = sys.argv[2], sys.argv[3], sys.argv[4]
        raw = open(st, "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        hdr = json.loads(raw[8:8 + n])
        b, e = hdr[name]["data_offsets"]
        needle = raw[8 + n + b:8 + n + min(e, b + 64)]
        for pack in sorted(glob.glob(os.path.join(store, "packs", "*"))):
            data = open(pack, "rb").read()
            at = data.find(needle)
            if at >= 0:
                flip(pack, at + len(needle) // 2)
                print(os.path.relpath(pack, store))
                return
        sys.exit(f"corrupt.py: data of {name} not found in {store}/packs")
    else:
        sys.exit(f"corrupt.py: unknown operation {op}")


if __name__ == "__main__":
    main()
