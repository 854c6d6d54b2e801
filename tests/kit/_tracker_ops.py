"""Runs sequences of operations on an offset restriction tracker and records what each returned.

The same interpreter runs under headrace (imported by tests/kit/test_sdf_trackers.py) and under
Apache Beam (run as a script with Beam's Python: it reads the sequences as JSON on stdin and
writes the records as JSON on stdout), so the two trackers can be compared op by op. It imports
neither library itself: the caller passes the `OffsetRange` and `OffsetRestrictionTracker`
classes.

A sequence is {"range": [start, stop], "ops": [...]} with ops
["claim", position], ["split", fraction], ["done"] (check_done) and ["restriction"].
"""

from __future__ import annotations

import json
import random
import sys
from typing import Any, Dict, List


def run(offset_range: Any, tracker_class: Any, sequence: Dict[str, Any]) -> List[Any]:
    """The records of one sequence: one per op, a JSON-able value or ["raised", kind]."""
    tracker = tracker_class(offset_range(*sequence["range"]))
    out: List[Any] = []
    for op in sequence["ops"]:
        try:
            if op[0] == "claim":
                out.append(bool(tracker.try_claim(op[1])))
            elif op[0] == "split":
                parts = tracker.try_split(op[1])
                out.append(None if parts is None
                           else [[p.start, p.stop] for p in parts])
            elif op[0] == "done":
                tracker.check_done()
                out.append("ok")
            else:
                r = tracker.current_restriction()
                out.append([r.start, r.stop])
        except ValueError:
            out.append(["raised", "ValueError"])
    return out


def sequences(count: int, seed: int) -> List[Dict[str, Any]]:
    """`count` random op sequences: claims that mostly move on by one (sometimes skip ahead,
    sometimes repeat or go back), splits at fractions including 0, check_done and the current
    restriction in between, until a claim fails or the ops run out."""
    rnd = random.Random(seed)
    result = []
    for _ in range(count):
        start = rnd.randint(0, 5)
        stop = start + rnd.choice([0, 1, 2, 3, 7, 10, 25, 100])
        ops: List[List[Any]] = []
        nxt = start
        for _ in range(rnd.randint(1, 30)):
            kind = rnd.random()
            if kind < 0.55:
                pos = nxt + (rnd.randint(1, 4) if rnd.random() < 0.1 else 0)
                if rnd.random() < 0.05 and nxt > start:
                    pos = nxt - rnd.randint(1, nxt - start)   # out of order: raises
                ops.append(["claim", pos])
                nxt = max(nxt, pos + 1)
            elif kind < 0.8:
                ops.append(["split", rnd.choice([0.0, 0.0, 0.1, 0.25, 0.5, 0.7, 0.9, 0.99,
                                                  round(rnd.random(), 3)])])
            elif kind < 0.9:
                ops.append(["done"])
            else:
                ops.append(["restriction"])
        ops.append(["done"])
        result.append({"range": [start, stop], "ops": ops})
    return result


if __name__ == "__main__":
    from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
    json.dump([run(OffsetRange, OffsetRestrictionTracker, s) for s in json.load(sys.stdin)],
              sys.stdout)
