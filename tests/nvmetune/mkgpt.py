#!/usr/bin/env python3
"""Writes a GPT (one partition) into an existing image file, then optionally wipes the protective
MBR and the primary header, leaving only the backup GPT at the end of the disk: what a careless
`dd` over the first sectors leaves, and what libblkid's safe probe alone does not see.
Usage: mkgpt.py IMAGE [--backup-only]"""
import os, struct, sys, uuid, zlib

SECTOR = 512

def header(my_lba, alt_lba, entries_lba, last, entries_crc, disk_guid):
    fields = [b"EFI PART", 0x00010000, 92, 0, 0, my_lba, alt_lba, 34, last - 33, disk_guid,
              entries_lba, 128, 128, entries_crc]
    h = struct.pack("<8sIIII QQQQ 16s QIII", *fields)
    crc = zlib.crc32(h) & 0xffffffff
    h = h[:16] + struct.pack("<I", crc) + h[20:]
    return h + bytes(SECTOR - len(h))

def main():
    path = sys.argv[1]
    backup_only = "--backup-only" in sys.argv[2:]
    size = os.path.getsize(path)
    last = size // SECTOR - 1
    linux = uuid.UUID("0fc63daf-8483-4772-8e79-3d69d8477de4").bytes_le
    entry = struct.pack("<16s16sQQQ72s", linux, uuid.uuid4().bytes_le, 2048, min(last - 34, 22527),
                        0, "data".encode("utf-16-le").ljust(72, b"\0"))
    entries = entry + bytes(128 * 128 - len(entry))
    ecrc = zlib.crc32(entries) & 0xffffffff
    guid = uuid.uuid4().bytes_le
    pmbr = bytearray(SECTOR)
    pmbr[446:462] = struct.pack("<B3sB3sII", 0, b"\0\x02\0", 0xEE, b"\xff\xff\xff", 1,
                                min(last, 0xffffffff))
    pmbr[510:512] = b"\x55\xaa"
    with open(path, "r+b") as f:
        f.seek(0); f.write(pmbr)
        f.seek(SECTOR); f.write(header(1, last, 2, last, ecrc, guid))
        f.seek(2 * SECTOR); f.write(entries)
        f.seek((last - 32) * SECTOR); f.write(entries)
        f.seek(last * SECTOR); f.write(header(last, 1, last - 32, last, ecrc, guid))
        if backup_only:
            f.seek(0); f.write(bytes(34 * SECTOR))

main()
