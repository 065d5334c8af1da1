#!/usr/bin/env python3
"""Load test of `lingbot-map serve`: N clients x M frames at once, bounded in count and time.

    # against a running server (e.g. on the GPU machine):
    python3 tests/serve/load_test.py --url http://127.0.0.1:8090 --clients 1,2,4,8 \\
        --frames 300 --width 518 --height 378 --stream window=64 --rounds 2
    # or a server of its own (the CTest on the CPU):
    python3 tests/serve/load_test.py --server build/lingbot-map \\
        --server-args="--model synthetic:1 --arch tiny" --clients 3 --frames 12 --preprocess none

Each client sends its own random frames (raw RGB) from one thread and takes its results in
another, as they come. Reported per round (a JSON line) and at the end as a table (the last
round of each client count): aggregate frames/s, per client its frames/s and the latency of
each frame (from its send() returning to its result arriving) at p50/p99, the server's own
latency quantiles, and the peaks of the streams' reserved memory (/metrics) and of the GPUs'
used memory (nvidia-smi, where it is). Checked: every client gets exactly its M results,
in order (the client raises on a gap or a reorder), and afterwards /metrics shows no session
left and the heap (lingbot_heap_in_use_bytes) after the last round no larger, give or take
2 MiB, than after the first round of the same client count, the very first round of all
excepted (the warm-up): no leak as clients come and go. Exit code 0 when all holds,
1 when not, 77 when the program has no serve command (CTest: skipped).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lingbot_map.client import Client, metrics  # noqa: E402
from serve_process import ServeProcess, Unavailable  # noqa: E402


# Bytes the heap at rest may differ by between rounds without a leak: the model keeps the
# activations of each batch size it ran since the last stream's first step, and which sizes
# the last steps of a round had depends on timing (on the CPU 1.2 MB more or less from one
# round to the next, flat over 30 rounds). The CTest's 3 x 4 streams after the warm-up show
# a leak of 300 KB a stream.
HEAP_SLACK = 2 << 20


def option_value(text):
    """"window=64" -> ("window", 64); numbers become numbers, true/false booleans."""
    key, _, value = text.partition("=")
    for parse in (int, float):
        try:
            return key, parse(value)
        except ValueError:
            pass
    return key, {"true": True, "false": False}.get(value, value)


def run_client(url, token, a, seed, out):
    """Streams a.frames frames; fills out (a dict) with its timings or its error."""
    rng = np.random.default_rng(seed)
    frames = [rng.integers(0, 256, (a.height, a.width, 3), np.uint8) for _ in range(4)]
    sent_at, got_at, indices = [], [], []
    try:
        stream = Client(url, token=token, timeout=a.timeout).start(
            width=a.width, height=a.height, frames=a.frames, maps=a.maps,
            preprocess=a.preprocess, stream=dict(a.stream))

        def take():  # the reader: stamps each result as it arrives
            try:
                for r in stream:
                    got_at.append(time.monotonic())
                    indices.append(r.index)
            except Exception:  # noqa: BLE001 - the sender's side raises it too
                pass

        reader = threading.Thread(target=take, daemon=True)
        reader.start()
        t0 = time.monotonic()
        for i in range(a.frames):
            if a.fps:  # a camera's pace instead of as fast as the server takes them
                time.sleep(max(0.0, t0 + i / a.fps - time.monotonic()))
            stream.send(frames[i % len(frames)])
            sent_at.append(time.monotonic())
        stream.finish(take=False)  # the reader takes the rest
        reader.join(a.timeout)
        out["seconds"] = time.monotonic() - t0
        if indices != list(range(a.frames)):
            raise RuntimeError(f"got {len(indices)} results, not frames 0..{a.frames - 1} "
                               "in order")
        out["latency"] = np.array(got_at) - np.array(sent_at)
    except Exception as e:  # noqa: BLE001 - reported per client
        out["error"] = f"{type(e).__name__}: {e}"


class MemoryPeaks(threading.Thread):
    """Samples, while a round runs, the streams' reserved estimates (/metrics) and, where
    nvidia-smi is, the memory the GPUs actually use: the peaks of both."""

    def __init__(self, url, token):
        super().__init__(daemon=True)
        self.url, self.token, self.stop = url, token, threading.Event()
        self.reserved = 0
        self.gpu_used = 0 if shutil.which("nvidia-smi") else None

    def run(self):
        while not self.stop.wait(0.25):
            try:
                m = metrics(self.url, token=self.token)
                self.reserved = max(self.reserved, sum(
                    v for _, v in m.all("lingbot_device_memory_reserved_bytes")))
                if self.gpu_used is not None:
                    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used",
                                          "--format=csv,noheader,nounits"], capture_output=True,
                                         text=True, timeout=10).stdout
                    used = sum(int(x) for x in out.split()) << 20  # MiB
                    self.gpu_used = max(self.gpu_used, used)
            except (OSError, ValueError, subprocess.SubprocessError):
                pass  # a missed sample; the round's own checks report real failures


def one_round(url, token, a, clients, round_index):
    outs = [{} for _ in range(clients)]
    threads = [threading.Thread(target=run_client, args=(url, token, a, 1000 * round_index + c,
                                                         outs[c]), daemon=True)
               for c in range(clients)]
    peaks = MemoryPeaks(url, token)
    peaks.start()
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(a.deadline)
    wall = time.monotonic() - t0
    peaks.stop.set()
    peaks.join()
    errors = [f"client {c}: {o.get('error', 'did not finish in time')}"
              for c, o in enumerate(outs) if "latency" not in o]
    report = {"round": round_index, "clients": clients, "frames": a.frames,
              "wall_seconds": round(wall, 3),
              "aggregate_fps": round(clients * a.frames / wall, 2), "errors": errors,
              "reserved_peak_bytes": peaks.reserved, "gpu_used_peak_bytes": peaks.gpu_used,
              "per_client": [{"fps": round(a.frames / o["seconds"], 2),
                              "latency_p50_ms": round(1e3 * np.percentile(o["latency"], 50), 1),
                              "latency_p99_ms": round(1e3 * np.percentile(o["latency"], 99), 1)}
                             for o in outs if "latency" in o]}
    m = metrics(url, token=token)
    report["server_latency_ms"] = {q: round(1e3 * (m.get("lingbot_frame_latency_seconds",
                                                         quantile=q) or float("nan")), 1)
                                   for q in ("0.5", "0.99")}
    # Sessions end when their connections do: give the server a moment to see the last close.
    deadline = time.monotonic() + 10
    while (active := m.get("lingbot_sessions_active")) != 0 and time.monotonic() < deadline:
        time.sleep(0.1)
        m = metrics(url, token=token)
    report["sessions_active_after"] = active
    if active != 0:
        errors.append(f"/metrics: lingbot_sessions_active is {active} after the clients left")
    # The server at rest: a stream's worker trims the heap after its session has ended.
    time.sleep(0.5)
    m = metrics(url, token=token)
    report["server_heap_bytes"] = m.get("lingbot_heap_in_use_bytes")
    report["server_rss_bytes"] = m.get("process_resident_memory_bytes")
    return report


def table(reports):
    """The last round of each client count as a Markdown table."""
    last = {r["clients"]: r for r in reports}
    lines = ["| streams | aggregate frames/s | frames/s per stream | latency p50 / p99 ms "
             "(worst stream) | server p50 / p99 ms | reserved peak | GPU used peak |",
             "|---|---|---|---|---|---|---|"]
    gib = lambda b: "-" if b is None else f"{b / 2**30:.2f} GiB"  # noqa: E731
    for n, r in sorted(last.items()):
        pc = r["per_client"] or [{"fps": 0, "latency_p50_ms": 0, "latency_p99_ms": 0}]
        lines.append(
            f"| {n} | {r['aggregate_fps']} | {np.mean([p['fps'] for p in pc]):.2f} | "
            f"{max(p['latency_p50_ms'] for p in pc)} / {max(p['latency_p99_ms'] for p in pc)} | "
            f"{r['server_latency_ms']['0.5']} / {r['server_latency_ms']['0.99']} | "
            f"{gib(r['reserved_peak_bytes'])} | {gib(r['gpu_used_peak_bytes'])} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="a running server")
    where.add_argument("--server", help="the lingbot-map program: start a server of its own")
    ap.add_argument("--server-args", default="--model synthetic:1 --arch tiny",
                    help="options of `serve` for --server")
    ap.add_argument("--token", default=os.environ.get("LINGBOT_SERVE_TOKEN"))
    ap.add_argument("--clients", default="4",
                    help="streams at once; a list (1,2,4,8) runs each count in turn")
    ap.add_argument("--frames", type=int, default=32, help="frames per client")
    ap.add_argument("--width", type=int, default=70)
    ap.add_argument("--height", type=int, default=56)
    ap.add_argument("--preprocess", default="crop", choices=["crop", "pad", "none"])
    ap.add_argument("--fps", type=float, default=0, help="pace each client (0 = flat out)")
    ap.add_argument("--maps", action="store_true", help="ask for depth and confidence too")
    ap.add_argument("--stream", type=option_value, action="append", default=[],
                    metavar="KEY=VALUE", help="a StreamOptions field of the start message")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=120, help="seconds any one wait may take")
    ap.add_argument("--deadline", type=float, default=1800, help="seconds a round may take")
    ap.add_argument("--json", help="write the reports here")
    a = ap.parse_args()
    try:
        counts = [int(c) for c in a.clients.split(",")]
    except ValueError:
        ap.error(f"--clients: {a.clients!r} is not a number or a list of numbers")
    if min(*counts, a.frames, a.rounds) < 1 or max(counts) > 256 or a.frames > 100000:
        ap.error("clients (1..256), frames (1..100000) and rounds must be positive")

    server = None
    if a.server:
        try:
            server = ServeProcess(a.server, *a.server_args.split())
        except Unavailable as e:
            print(f"load test skipped: {e}")
            return 77
    url = a.url or server.url
    reports, failed = [], False
    try:
        for clients in counts:
            for _ in range(a.rounds):
                report = one_round(url, a.token, a, clients, len(reports))
                reports.append(report)
                print(json.dumps(report))
                failed |= bool(report["errors"])
        # The rounds of the last client count after the first of all, the warm-up: a leak
        # grows the heap round after round, so the last is compared with the first of them.
        same = [r for r in reports[1:] if r["clients"] == counts[-1]]
        heap = [r["server_heap_bytes"] for r in same]
        if None in heap:
            print("the server does not report lingbot_heap_in_use_bytes: no leak check")
        elif len(heap) >= 2:
            rss = [r["server_rss_bytes"] and int(r["server_rss_bytes"]) for r in same]
            print(f"server heap after each round: {[int(b) for b in heap]} bytes; "
                  f"resident: {rss}")
            if heap[-1] > heap[0] + HEAP_SLACK:
                print(f"server heap grew from {int(heap[0])} to {int(heap[-1])} bytes "
                      f"over {len(heap) - 1} rounds")
                failed = True
    finally:
        if server:
            server.stop()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(reports, f, indent=1)
    print(table(reports))
    print("load test " + ("FAILED" if failed else "passed"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
