#!/usr/bin/env python3
"""Where the bytes of an uncompressed `.pftrace` go (python3 standard library only).

    python3 bench/pftrace_bytes.py TRACE.pftrace

Walks the protobuf wire format (no schema needed) and splits the file into: thread slice
packets (BEGIN and END: their framing, and the debug annotations of BEGINs, by key iid),
instants, interned data, track descriptors and everything else; prints bytes per slice of
each part. Field numbers are those of trace/src/perfetto/field.rs.
"""

import collections
import sys

TRACE_PACKET = 1
PACKET_TRACK_EVENT = 11
PACKET_INTERNED_DATA = 12
PACKET_TRACK_DESCRIPTOR = 60
EVENT_DEBUG_ANNOTATIONS = 4
EVENT_TYPE = 9
INTERNED_ANNOTATION_NAMES = 3
INTERNED_IID = 1
INTERNED_NAME = 2
ANNOTATION_NAME_IID = 1
BEGIN, END, INSTANT = 1, 2, 3


def varint(buf, i):
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, i


def fields(buf, start=0, end=None):
    """(field, wire type, value or (from, to), first byte, end) of each field."""
    i, end = start, len(buf) if end is None else end
    while i < end:
        first = i
        tag, i = varint(buf, i)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            value, i = varint(buf, i)
        elif wire == 1:
            value, i = int.from_bytes(buf[i : i + 8], "little"), i + 8
        elif wire == 2:
            n, i = varint(buf, i)
            value, i = (i, i + n), i + n
        elif wire == 5:
            value, i = int.from_bytes(buf[i : i + 4], "little"), i + 4
        else:
            raise ValueError(f"wire type {wire} at byte {first}")
        yield field, wire, value, first, i


def main(path):
    buf = open(path, "rb").read()
    parts = collections.Counter()
    keys = collections.Counter()
    key_names = {}
    slices = 0
    for field, wire, value, first, end in fields(buf):
        if field != TRACE_PACKET or wire != 2:
            parts["other"] += end - first
            continue
        event = interned = descriptor = None
        for f, _, v, _, _ in fields(buf, *value):
            if f == PACKET_TRACK_EVENT:
                event = v
            elif f == PACKET_INTERNED_DATA:
                interned = v
            elif f == PACKET_TRACK_DESCRIPTOR:
                descriptor = v
        if interned is not None:
            parts["interned data"] += end - first
            for f, _, v, _, _ in fields(buf, *interned):
                if f == INTERNED_ANNOTATION_NAMES:
                    entry = {ef: ev for ef, _, ev, _, _ in fields(buf, *v)}
                    key_names[entry[INTERNED_IID]] = bytes(buf[slice(*entry[INTERNED_NAME])]).decode()
            continue
        if descriptor is not None:
            parts["track descriptors"] += end - first
            continue
        if event is None:
            parts["other packets"] += end - first
            continue
        kind = next((v for f, _, v, _, _ in fields(buf, *event) if f == EVENT_TYPE), None)
        if kind == BEGIN:
            slices += 1
            args = 0
            for f, _, v, a, b in fields(buf, *event):
                if f == EVENT_DEBUG_ANNOTATIONS:
                    args += b - a
                    iid = next(ev for ef, _, ev, _, _ in fields(buf, *v) if ef == ANNOTATION_NAME_IID)
                    keys[iid] += b - a
            parts["BEGIN framing"] += end - first - args
            parts["BEGIN arguments"] += args
        elif kind == END:
            parts["END"] += end - first
        elif kind == INSTANT:
            parts["instants"] += end - first
        else:
            parts["counters and other events"] += end - first
    total = len(buf)
    print(f"{path}: {total} bytes, {slices} slices, {total / max(slices, 1):.1f} bytes per slice")
    for name, n in parts.most_common():
        print(f"  {name:28} {n:>12} bytes  {n / max(slices, 1):6.1f} per slice")
    print("  arguments by key:")
    for iid, n in keys.most_common():
        print(f"    {key_names.get(iid, iid)!s:26} {n:>12} bytes  {n / max(slices, 1):6.1f} per slice")


if __name__ == "__main__":
    main(sys.argv[1])
