#!/usr/bin/env python3
"""Decodes a Perfetto trace written by `mlprof convert` with Perfetto's own published schema
(the `perfetto` package's compiled protos + `protobuf`, fully offline) and checks it the way
trace_processor reads it; optionally compares it event by event with the Chrome JSON trace of
the same run.

    perfetto_check.py TRACE.pftrace [--chrome TRACE.json] [--origin NS] [--samples]

Prints one JSON object on stdout:

    {"packets", "compressed_batches", "sequences",
     "processes": {pid: name}, "threads": {tid: {"pid", "name"}},
     "slices": {name: count}, "instants": {name: count},
     "slices_by_category": {category: count},
     "max_depth": {"pid/tid": depth}, "late_begins": N,
     "flows": {"begun", "terminated", "paired"},
     "counters": {"pid/name": {"unit", "values", "first", "last"}},
     "chrome": null | {"compared", "missing_in_perfetto", "extra_in_perfetto", "examples"},
     "perf_samples": N,
     "errors": [...]}

With --samples also "samples": [[ts, pid, tid, [function names root first (null: unnamed
frame)] | null (no callstack)], ...] and "itt_slices": [[pid, tid, name, start, dur], ...].

`errors` lists what a reader would trip on: an interned id used before (or without) its
definition on its sequence, an END with no open slice, a slice left open, an event on a track
with no descriptor, a thread whose process has no descriptor, a flow that ends without a
start; a CPU sample (PerfSample) without SEQ_NEEDS_INCREMENTAL_STATE or on a sequence whose
state was never cleared, whose callstack, frames, mappings or their strings are not interned on
its sequence before it, or whose thread has no descriptor.
"""

import argparse
import json
import sys
import zlib
from collections import Counter, defaultdict

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

CLOCK_MONOTONIC = 3
TYPE_BEGIN, TYPE_END, TYPE_INSTANT, TYPE_COUNTER = 1, 2, 3, 4
MAX_ERRORS = 50


def packets_of(data):
    """Yields the trace's packets in file order, inflating compressed batches."""
    trace = pb.Trace()
    trace.ParseFromString(data)
    for packet in trace.packet:
        if packet.HasField("compressed_packets"):
            inner = pb.Trace()
            inner.ParseFromString(zlib.decompress(packet.compressed_packets))
            yield from ((p, True) for p in inner.packet)
        else:
            yield packet, False


class Sequence:
    def __init__(self):
        self.clear()
        self.valid = False  # a packet with SEQ_INCREMENTAL_STATE_CLEARED was seen
        self.clock = None  # incremental clock value, once a snapshot defines it
        self.clock_id = None

    def clear(self):
        self.interned = defaultdict(dict)
        self.clock_id_default = 0
        self.track_uuid = None


def annotation_value(ann, seq, errors):
    if ann.HasField("int_value"):
        return ann.int_value
    if ann.HasField("uint_value"):
        return ann.uint_value
    if ann.HasField("double_value"):
        return ann.double_value
    if ann.HasField("bool_value"):
        return ann.bool_value
    if ann.HasField("string_value"):
        return ann.string_value
    if ann.HasField("string_value_iid"):
        value = seq.interned["string_values"].get(ann.string_value_iid)
        if value is None:
            errors.append(f"string value iid {ann.string_value_iid} not interned on its sequence")
        return value
    if ann.HasField("pointer_value"):
        return f"{ann.pointer_value:#x}"
    if len(ann.array_values):
        return [annotation_value(a, seq, errors) for a in ann.array_values]
    return None


def decode(data):
    errors = []
    tracks = {}  # uuid -> ("process", pid, name) | ("thread", pid, tid, name) | ("counter", pid, name, unit)
    process_uuid_pid = {}
    sequences = defaultdict(Sequence)
    events = []  # (ts, index, uuid, type, name, category, args, flows, terminating)
    counter_values = defaultdict(list)
    stats = Counter()
    samples = []  # [ts, pid, tid, frames root first | None]
    for index, (packet, compressed) in enumerate(packets_of(data)):
        stats["packets"] += 1
        stats["compressed_packets"] += compressed
        seq_id = packet.trusted_packet_sequence_id
        seq = sequences[seq_id]
        if packet.sequence_flags & 1:
            seq.clear()
            seq.valid = True
        if packet.HasField("trace_packet_defaults"):
            d = packet.trace_packet_defaults
            seq.clock_id_default = d.timestamp_clock_id
            if d.track_event_defaults.HasField("track_uuid"):
                seq.track_uuid = d.track_event_defaults.track_uuid
        if packet.HasField("clock_snapshot"):
            for clock in packet.clock_snapshot.clocks:
                if clock.is_incremental:
                    seq.clock, seq.clock_id = clock.timestamp, clock.clock_id
        if packet.HasField("interned_data"):
            data_ = packet.interned_data
            for table, entries in (
                ("names", data_.event_names),
                ("categories", data_.event_categories),
                ("annotation_names", data_.debug_annotation_names),
            ):
                for e in entries:
                    seq.interned[table][e.iid] = e.name
            for e in data_.debug_annotation_string_values:
                seq.interned["string_values"][e.iid] = e.str.decode("utf-8", "replace")
            intern_code(seq, data_)
        if packet.HasField("track_descriptor"):
            t = packet.track_descriptor
            if t.HasField("process"):
                tracks[t.uuid] = ("process", t.process.pid, t.process.process_name)
                process_uuid_pid[t.uuid] = t.process.pid
            elif t.HasField("thread"):
                tracks[t.uuid] = ("thread", t.thread.pid, t.thread.tid, t.thread.thread_name)
            elif t.HasField("counter"):
                tracks[t.uuid] = ("counter", t.parent_uuid, t.name, t.counter.unit_name)
        if packet.HasField("perf_sample"):
            samples.append(perf_sample(packet, seq, index, errors))
            continue
        if not packet.HasField("track_event"):
            continue
        # The timestamp, as trace_processor's tokenizer computes it.
        clock_id = (
            packet.timestamp_clock_id if packet.HasField("timestamp_clock_id") else seq.clock_id_default
        )
        if clock_id and clock_id == seq.clock_id:
            seq.clock += packet.timestamp
            ts = seq.clock
        elif clock_id in (0, CLOCK_MONOTONIC):
            ts = packet.timestamp
            stats["absolute_timestamps"] += 1
        else:
            errors.append(f"packet {index}: clock {clock_id} never defined on sequence {seq_id}")
            continue
        te = packet.track_event
        uuid = te.track_uuid if te.HasField("track_uuid") else seq.track_uuid
        if te.type == TYPE_COUNTER:
            value = te.double_counter_value if te.HasField("double_counter_value") else te.counter_value
            counter_values[uuid].append((ts, value))
            continue
        name = None
        if te.HasField("name_iid"):
            name = seq.interned["names"].get(te.name_iid)
            if name is None:
                errors.append(f"packet {index}: event name iid {te.name_iid} not interned on seq {seq_id}")
        elif te.HasField("name"):
            name = te.name
        categories = []
        for iid in te.category_iids:
            c = seq.interned["categories"].get(iid)
            if c is None:
                errors.append(f"packet {index}: category iid {iid} not interned on seq {seq_id}")
            categories.append(c or "")
        args = {}
        for ann in te.debug_annotations:
            key = seq.interned["annotation_names"].get(ann.name_iid) if ann.HasField("name_iid") else ann.name
            if key is None:
                errors.append(f"packet {index}: annotation name iid {ann.name_iid} not interned")
                continue
            args[key] = annotation_value(ann, seq, errors)
        events.append(
            (
                ts,
                index,
                uuid,
                te.type,
                name,
                ",".join(categories),
                args,
                list(te.flow_ids),
                list(te.terminating_flow_ids),
            )
        )
    return tracks, process_uuid_pid, sequences, events, counter_values, stats, errors, samples


def intern_code(seq, data):
    """The tables of sampled stacks an InternedData adds to its sequence."""
    for table, entries in (("function_names", data.function_names), ("mapping_paths", data.mapping_paths)):
        for e in entries:
            seq.interned[table][e.iid] = e.str.decode("utf-8", "replace")
    for e in data.build_ids:
        seq.interned["build_ids"][e.iid] = e.str
    for table, entries in (("mappings", data.mappings), ("frames", data.frames)):
        for e in entries:
            seq.interned[table][e.iid] = e
    for e in data.callstacks:
        seq.interned["callstacks"][e.iid] = list(e.frame_ids)


def frame_name(seq, iid, where, errors):
    """The function name of frame `iid` (None: unnamed), checking what it refers to."""
    frame = seq.interned["frames"].get(iid)
    if frame is None:
        errors.append(f"{where}: frame iid {iid} not interned on its sequence")
        return None
    if frame.mapping_id:
        mapping = seq.interned["mappings"].get(frame.mapping_id)
        if mapping is None:
            errors.append(f"{where}: mapping iid {frame.mapping_id} not interned on its sequence")
        else:
            for part in mapping.path_string_ids:
                if part not in seq.interned["mapping_paths"]:
                    errors.append(f"{where}: mapping path iid {part} not interned on its sequence")
            if mapping.build_id and mapping.build_id not in seq.interned["build_ids"]:
                errors.append(f"{where}: build id iid {mapping.build_id} not interned on its sequence")
    if not frame.function_name_id:
        return None
    name = seq.interned["function_names"].get(frame.function_name_id)
    if name is None:
        errors.append(f"{where}: function name iid {frame.function_name_id} not interned on its sequence")
    return name


def perf_sample(packet, seq, index, errors):
    """[ts, pid, tid, function names root first | None] of a PerfSample packet, as
    trace_processor would read it (timestamps on the trace clock, CLOCK_MONOTONIC here)."""
    where = f"packet {index}"
    if not packet.sequence_flags & 2 or not seq.valid:
        errors.append(
            f"{where}: a sample without SEQ_NEEDS_INCREMENTAL_STATE, or on a sequence never cleared"
        )
    clock_id = packet.timestamp_clock_id if packet.HasField("timestamp_clock_id") else seq.clock_id_default
    if clock_id not in (0, CLOCK_MONOTONIC):
        errors.append(f"{where}: a sample on clock {clock_id}")
    sample = packet.perf_sample
    frames = None
    if sample.HasField("callstack_iid"):
        ids = seq.interned["callstacks"].get(sample.callstack_iid)
        if ids is None:
            errors.append(f"{where}: callstack iid {sample.callstack_iid} not interned on its sequence")
        else:
            frames = [frame_name(seq, iid, where, errors) for iid in ids]
    return [packet.timestamp, sample.pid, sample.tid, frames]


def check(path, chrome_path=None, origin=None, with_samples=False):
    with open(path, "rb") as f:
        tracks, process_uuid_pid, sequences, events, counter_values, stats, errors, samples = decode(f.read())
    processes = {t[1]: t[2] for t in tracks.values() if t[0] == "process"}
    threads = {t[2]: {"pid": t[1], "name": t[3]} for t in tracks.values() if t[0] == "thread"}
    for t in tracks.values():
        if t[0] == "thread" and t[1] not in processes:
            errors.append(f"thread {t[2]} of pid {t[1]}: no process descriptor")
    described = {(t[1], t[2]) for t in tracks.values() if t[0] == "thread"}
    for pid, tid in sorted({(s[1], s[2]) for s in samples} - described):
        errors.append(f"samples of thread {tid} of pid {pid}, which has no descriptor")
    # Slices, per track, in trace_processor's order: by time, then file order.
    by_track = defaultdict(list)
    for e in events:
        by_track[e[2]].append(e)
    slices, instants, by_category, by_key = Counter(), Counter(), Counter(), Counter()
    max_depth, full = {}, []
    late = 0
    flow_out, flow_in = {}, {}
    for uuid, evs in by_track.items():
        track = tracks.get(uuid)
        if track is None or track[0] != "thread":
            errors.append(f"{len(evs)} events on track {uuid}, which has no thread descriptor")
            continue
        pid, tid = track[1], track[2]
        # File order per track must already be time order except for late BEGINs.
        last = None
        for e in evs:
            if last is not None and e[0] < last:
                late += 1
            last = e[0] if last is None else max(last, e[0])
        stack, depth = [], 0
        for ts, _index, _u, kind, name, cat, args, flows, terminating in sorted(
            evs, key=lambda e: (e[0], e[1])
        ):
            if kind == TYPE_BEGIN:
                stack.append((ts, name, cat, args))
                depth = max(depth, len(stack))
            elif kind == TYPE_END:
                if not stack:
                    errors.append(f"pid {pid} tid {tid}: END at {ts} with no open slice")
                    continue
                start, bname, bcat, bargs = stack.pop()
                slices[bname] += 1
                by_category[bcat] += 1
                by_key[f"{bcat}|{bname}"] += 1
                full.append((pid, tid, bname, bcat, start, ts - start, bargs))
                for f in flows:
                    flow_out[f] = (pid, tid, bname)
                for f in terminating:
                    flow_in[f] = (pid, tid, bname)
            elif kind == TYPE_INSTANT:
                instants[name] += 1
                full.append((pid, tid, name, cat, ts, None, args))
        if stack:
            errors.append(f"pid {pid} tid {tid}: {len(stack)} slices never ended")
        max_depth[f"{pid}/{tid}"] = depth
    for f in flow_in:
        if f not in flow_out:
            errors.append(f"flow {f} ends at {flow_in[f]} but never starts")
    counters = {}
    for uuid, values in counter_values.items():
        track = tracks.get(uuid)
        if track is None or track[0] != "counter":
            errors.append(f"{len(values)} counter values on track {uuid}, which has no counter descriptor")
            continue
        pid = process_uuid_pid.get(track[1])
        values.sort(key=lambda v: v[0])
        counters[f"{pid}/{track[2]}"] = {
            "unit": track[3],
            "values": len(values),
            "first": values[0][1],
            "last": values[-1][1],
            "series": [[t, v] for t, v in values] if len(values) <= 5000 else None,
        }
    report = {
        "packets": stats["packets"],
        "compressed_batches": stats["compressed_packets"] > 0,
        "absolute_timestamps": stats["absolute_timestamps"],
        "sequences": len(sequences),
        "processes": processes,
        "threads": threads,
        "slices": dict(slices),
        "instants": dict(instants),
        "slices_by_category": dict(by_category),
        "slices_by_category_name": dict(by_key),
        "max_depth": max_depth,
        "late_begins": late,
        "flows": {
            "begun": len(flow_out),
            "terminated": len(flow_in),
            "paired": len(set(flow_out) & set(flow_in)),
        },
        "counters": counters,
        "perf_samples": len(samples),
        "chrome": compare_chrome(full, counters, chrome_path, origin) if chrome_path else None,
        "errors": errors[:MAX_ERRORS],
        "error_count": len(errors),
    }
    if with_samples:
        report["samples"] = samples
        report["itt_slices"] = [
            [pid, tid, name, start, dur]
            for pid, tid, name, cat, start, dur, _ in full
            if cat.startswith("itt")
        ]
    return report


def norm(value):
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, list):
        return tuple(norm(v) for v in value)
    return value


def compare_chrome(full, counters, chrome_path, origin):
    """Every X and i event of the Chrome trace must be a slice / instant of the Perfetto one,
    with the same thread, name, category, time (ns), duration and arguments."""
    with open(chrome_path) as f:
        chrome = json.load(f)["traceEvents"]

    def ns(us):
        return round(us * 1000)

    theirs = Counter()
    for e in chrome:
        if e["ph"] == "X":
            dur = ns(e["dur"])
        elif e["ph"] == "i":
            dur = None
        else:
            continue
        args = tuple(sorted((k, norm(v)) for k, v in e.get("args", {}).items()))
        theirs[(e["pid"], e["tid"], e["name"], e["cat"], ns(e["ts"]), dur, args)] += 1
    ours = Counter()
    for pid, tid, name, cat, ts, dur, args in full:
        key_args = tuple(sorted((k, norm(v)) for k, v in args.items()))
        ours[(pid, tid, name, cat, ts - (origin or 0), dur, key_args)] += 1
    if origin is None:
        # The run start the Chrome times are relative to: both traces hold the same events,
        # so their earliest ones are the same event.
        origin = min(k[4] for k in ours) - min(k[4] for k in theirs) if ours and theirs else 0
        ours = Counter({(k[0], k[1], k[2], k[3], k[4] - origin, k[5], k[6]): n for k, n in ours.items()})
    missing = theirs - ours
    extra = ours - theirs
    # Counter tracks: the same tracks with the same values at the same times (Chrome prints
    # values with the decimals their source is good for).
    chrome_counters = defaultdict(list)
    for e in chrome:
        if e["ph"] == "C":
            (value,) = e["args"].values()
            chrome_counters[f"{e['pid']}/{e['name']}"].append((ns(e["ts"]) + origin, value))
    counter_diff = {}
    for k in set(chrome_counters) | set(counters):
        theirs_c = sorted(chrome_counters.get(k, []))
        ours_c = (counters.get(k) or {}).get("series")
        if ours_c is None and k in counters:
            continue  # too long to compare value by value
        ours_c = sorted(tuple(v) for v in ours_c or [])
        same = len(theirs_c) == len(ours_c) and all(
            t1 == t2 and abs(v1 - v2) <= 5e-4 + 1e-9 * abs(v2) for (t1, v1), (t2, v2) in zip(theirs_c, ours_c)
        )
        if not same:
            counter_diff[k] = [len(theirs_c), len(ours_c)]
    return {
        "compared": sum(theirs.values()),
        "missing_in_perfetto": sum(missing.values()),
        "extra_in_perfetto": sum(extra.values()),
        "examples": [repr(k) for k in list(missing)[:3]] + [repr(k) for k in list(extra)[:3]],
        "counter_differences": counter_diff,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--chrome", help="Chrome JSON trace of the same run, to compare with")
    ap.add_argument(
        "--origin", type=int, help="run start (ns) the Chrome times are relative to (default: inferred)"
    )
    ap.add_argument("--samples", action="store_true", help="list the CPU samples and the ITT slices")
    args = ap.parse_args()
    json.dump(check(args.trace, args.chrome, args.origin, args.samples), sys.stdout)
    print()


if __name__ == "__main__":
    main()
