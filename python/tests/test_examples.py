"""The examples (python/examples/), run as their own processes against the sidecar, two instances
at a time, with aborts and failed checkpoints on purpose; their outputs counted per id: every input
exactly once in the output (read_committed) or in the sink, and nothing left for a fresh member."""

from __future__ import annotations

import collections
import os
import signal
import sqlite3
import subprocess
import sys
import time

from confluent_kafka import Consumer

from harness import QUIET, Setup, bootstrap, unique

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
N = 200
WITHIN = 240.0


def start(script, *args):
    return subprocess.Popen([sys.executable, os.path.join(EXAMPLES, script), "--bootstrap", bootstrap(), *args],
                            cwd=EXAMPLES, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def stop_all(procs):
    """SIGTERM (the examples finish their current step and print their summary), then their output."""
    outs = []
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        out, _ = p.communicate(timeout=120)
        outs.append(out)
        assert p.returncode == 0, "example exited %d:\n%s" % (p.returncode, out[-3000:])
    return outs


def summary(out):
    line = [l for l in out.splitlines() if l.startswith("summary:")][-1]
    return {k: int(v) for k, v in (kv.split("=") for kv in line.split()[1:])}


def test_consume_transform_produce_counts_each_id_once():
    with Setup(3, N) as s:
        procs = [start("consume_transform_produce.py", "--group", s.group, "--input", s.input, "--output", s.output,
                       "--txn-id", unique("pctp"), "--abort-every", "3", "--batch", "10") for _ in range(2)]
        try:
            counts = collections.Counter()
            reader = Consumer(dict(s.conf, **{"group.id": unique("pread"), "isolation.level": "read_committed",
                                              "auto.offset.reset": "earliest", "enable.auto.commit": False}))
            reader.subscribe([s.output])
            end = time.monotonic() + WITHIN
            while sum(counts.values()) < N and time.monotonic() < end:
                m = reader.poll(0.5)
                if m is not None and m.error() is None:
                    counts[m.key()] += 1
            # Read on a little: a duplicate committed later would show.
            quiet_end = time.monotonic() + QUIET
            while time.monotonic() < quiet_end:
                m = reader.poll(0.5)
                if m is not None and m.error() is None:
                    counts[m.key()] += 1
                    assert m.value() == m.key().upper().replace(b"KEY", b"VALUE"), m.value()
            reader.close()
        finally:
            outs = stop_all(procs)
        sums = [summary(o) for o in outs]
        print("consume-transform-produce:", sums)
        assert set(counts) == {b"key-%d" % i for i in range(N)}, "ids missing from the output"
        assert [k for k, n in counts.items() if n != 1] == [], "ids output more than once"
        assert sum(x["out"] for x in sums) == N
        assert sum(x["aborts"] for x in sums) > 0, "no transaction aborted: --abort-every was not exercised"
        s.close_clients()
        assert s.left_for_fresh_member(QUIET) == []


def test_checkpoint_sink_counts_each_id_once(tmp_path):
    db = str(tmp_path / "sink.db")
    with Setup(3, N) as s:
        procs = [start("checkpoint_sink.py", "--group", s.group, "--input", s.input, "--txn-id", unique("psink"),
                       "--sink", db, "--fail-every", "4", "--batch", "10") for _ in range(2)]
        try:
            end = time.monotonic() + WITHIN
            acked = 0
            while time.monotonic() < end:
                # The examples print their summary only at the end: watch the sink and the group.
                time.sleep(1)
                if os.path.exists(db):
                    with sqlite3.connect(db, timeout=60) as con:
                        try:
                            acked = con.execute("SELECT COUNT(*) FROM sink WHERE acked > 0").fetchone()[0]
                        except sqlite3.OperationalError:
                            acked = 0
                if acked >= N:
                    break
        finally:
            outs = stop_all(procs)
        sums = [summary(o) for o in outs]
        print("checkpoint sink:", sums)
        with sqlite3.connect(db) as con:
            rows = {r[0]: r[1] for r in con.execute("SELECT id, acked FROM sink")}
        assert sorted(rows) == sorted("key-%d" % i for i in range(N)), "ids missing from the sink"
        assert [i for i, n in rows.items() if n != 1] == [], "ids whose acknowledgement was committed other than once"
        assert sum(x["failed"] for x in sums) > 0, "no checkpoint failed: --fail-every was not exercised"
        # Committed acknowledgements: each record once. A record acknowledged twice (a duplicate
        # delivery after its commit) would make the sum exceed N; one never acknowledged is left below.
        s.close_clients()
        left = s.left_for_fresh_member(QUIET)
        assert left == [], "records left unacknowledged"
        assert sum(x["acked"] for x in sums) == N
