#!/usr/bin/env python3
"""The oracle for tests/rrule_oracle.rs: python-dateutil's rrulestr expands each rule on wall
time, zoneinfo with fold=0 turns wall times into instants (RFC 5545 section 3.3.5, PEP 495:
a time in a gap is read with the offset before it, a repeated time means its first pass).

Reads JSON lines {"text", "zone", "after_ms", "count"}; answers one line each: the first
`count` distinct instants after `after_ms` in epoch milliseconds, in order, space-separated
(empty when there are none), or "ERR <message>" when dateutil refuses the rule.
"""
import re
import sys
import json
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from dateutil.rrule import rrulestr

# Occurrences read past the first instant found: more than any gap-shifted instant can
# overtake (a shift is at most a few hours; a SECONDLY rule is the densest generated).
LOOKAHEAD = timedelta(hours=6)
MAX_OCCURRENCES = 200_000


def answer(case):
    zone = ZoneInfo(case["zone"])
    naive_text = re.sub(r";TZID=[^:;]+", "", case["text"])
    # UNTIL is UTC (RFC 5545 with a zoned DTSTART); the rule is expanded on wall time, so it
    # becomes the wall time it is in the zone.
    naive_text = re.sub(
        r"UNTIL=(\d{8}T\d{6})Z",
        lambda m: "UNTIL="
        + datetime.strptime(m.group(1), "%Y%m%dT%H%M%S")
        .replace(tzinfo=timezone.utc)
        .astimezone(zone)
        .strftime("%Y%m%dT%H%M%S"),
        naive_text,
    )
    rule = rrulestr(naive_text, forceset=True)
    after = datetime.fromtimestamp(case["after_ms"] / 1000, tz=timezone.utc)
    # Wall times from a little before `after`: a gap-shifted time reads earlier than it is.
    start = after.astimezone(zone).replace(tzinfo=None) - timedelta(hours=4)
    instants = set()
    horizon = None
    for n, wall in enumerate(rule.xafter(start, inc=True)):
        if n > MAX_OCCURRENCES or (horizon is not None and wall > horizon):
            break
        instant = wall.replace(tzinfo=zone, fold=0).astimezone(timezone.utc)
        if instant > after:
            instants.add(instant)
            if len(instants) >= case["count"] and horizon is None:
                horizon = wall + LOOKAHEAD
    return " ".join(str(int(i.timestamp() * 1000)) for i in sorted(instants)[: case["count"]])


def main():
    out = sys.stdout
    for line in sys.stdin:
        case = json.loads(line)
        try:
            out.write(answer(case) + "\n")
        except Exception as e:  # dateutil refusing the rule is an answer of its own
            out.write("ERR " + str(e).replace("\n", " ") + "\n")
    out.flush()


if __name__ == "__main__":
    main()
