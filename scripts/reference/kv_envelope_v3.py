#!/usr/bin/env python3
"""An independent encoder of docs/formats/kv-block.md's version 3 (a hybrid pool's
envelope: pages, then the state section). It prints the golden envelope that
kv/tests/hybrid_envelope.rs checks HybridPool's export against, written from the
document alone (no tl code).

Example: L = 1, H = 1, D = 2, B = 2 pages (f16, dtype 1); state geometry R = 1, F = 2.
The exported list is a two-row block table of G = 2 (a page, then the state column):
  [page 0 (fill 2, registered under block_hash(None, [1, 2])),
   slot 0 (fill 2, registered under group_hash(that, 1), values [1.0, f32 bits 7fc00001]),
   page 1 (fill 1, no hash),
   NO_BLOCK (a hole)]
"""
import struct

OFFSET, PRIME, MASK = 0xCBF29CE484222325, 0x100000001B3, (1 << 64) - 1


def fnv(data: bytes) -> int:
    h = OFFSET
    for b in data:
        h = ((h ^ b) * PRIME) & MASK
    return h


def block_hash(parent, tokens):
    data = b"\x00" if parent is None else b"\x01" + struct.pack("<Q", parent)
    return fnv(data + b"".join(struct.pack("<I", t) for t in tokens))


def group_hash(h, group):
    return h if group == 0 else fnv(b"\x02" + struct.pack("<QI", h, group))


def u32s(*v):
    return struct.pack("<" + "I" * len(v), *v)


h0 = block_hash(None, [1, 2])
# Header: magic, version 3, dtype 1 (f16), L, H, D, B, N = 2 page records, reserved.
out = b"TLKVBLK\0" + u32s(3, 1, 1, 1, 2, 2, 2, 0)
# Page records: fill, flags, hash, then K and V slabs (f16 bit patterns).
out += u32s(2, 1) + struct.pack("<Q", h0) + struct.pack("<4H", 0x3C00, 0x4000, 0x4200, 0x4400)
out += struct.pack("<4H", 0x8000, 0x7C00, 0x7E01, 0x0001)
out += u32s(1, 0) + struct.pack("<Q", 0) + struct.pack("<4H", 0xABCD, 0, 0, 0) + struct.pack("<4H", 1, 2, 3, 0xFFFF)
# State section: R, F, M = 1 slot, Z = 1 hole; the hole's index (3); the slot record.
out += u32s(1, 2, 1, 1) + u32s(3)
out += u32s(2, 1) + struct.pack("<Q", group_hash(h0, 1)) + u32s(1, 0)
out += struct.pack("<f", 1.0) + u32s(0x7FC00001)
out += struct.pack("<Q", fnv(out))
print(out.hex())
