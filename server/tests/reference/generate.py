#!/usr/bin/env python3
"""Writes schedules.json: next instants of cron and RRULE schedules computed by independent
implementations (croniter and python-dateutil on wall-clock time, zoneinfo for the zone).

zoneinfo with fold=0 applies the rule DESIGN.md fixes (RFC 5545 section 3.3.5, PEP 495): a wall
time inside a DST gap is read with the offset in force before the gap, and a wall time that
occurs twice means its first occurrence.

Run: pip install croniter python-dateutil && python3 generate.py > schedules.json
"""
import json
import re
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from croniter import croniter
from dateutil.rrule import rrulestr

COUNT = 16


def resolve(naive, zone):
    return naive.replace(tzinfo=ZoneInfo(zone), fold=0).astimezone(timezone.utc)


def sequence(naive_iter, zone, after):
    """The first COUNT distinct instants after `after`, in order."""
    instants = set()
    for naive in naive_iter:
        instant = resolve(naive, zone)
        if instant > after:
            instants.add(instant)
        if len(instants) >= COUNT * 3:
            break
    return sorted(instants)[:COUNT]


def cron_case(expr, zone, after_text):
    after = datetime.fromisoformat(after_text)
    # Start a day early: the reference must not share our search-start shortcut.
    start = after.astimezone(ZoneInfo(zone)).replace(tzinfo=None) - timedelta(days=1)
    it = croniter(expr, start)
    naive_iter = (it.get_next(datetime) for _ in range(100000))
    return sequence(naive_iter, zone, after)


def strip_zone(text):
    """DTSTART;TZID=Z:V -> DTSTART:V (the rule is expanded on wall time); returns the zone."""
    zone = re.search(r"TZID=([^:;]+)", text).group(1)
    return re.sub(r";TZID=[^:;]+", "", text), zone


def rrule_case(text, after_text):
    naive_text, zone = strip_zone(text)
    after = datetime.fromisoformat(after_text)
    rule = rrulestr(naive_text, forceset=True)
    return sequence(iter(rule), zone, after)


CRON = [
    # (expression, zone, after)
    ("30 2 * * *", "America/New_York", "2026-03-06T00:00:00+00:00"),
    ("0 * * * *", "America/New_York", "2026-03-08T04:30:00+00:00"),
    ("*/20 * * * *", "America/New_York", "2026-03-08T06:10:00+00:00"),
    ("*/20 * * * *", "America/New_York", "2026-03-08T07:05:00+00:00"),
    ("30 1 * * *", "America/New_York", "2026-10-30T00:00:00+00:00"),
    ("*/15 1 * * *", "America/New_York", "2026-11-01T05:20:00+00:00"),
    ("0 * * * *", "America/New_York", "2026-11-01T03:30:00+00:00"),
    ("30 1 * * *", "Europe/London", "2026-03-27T00:00:00+00:00"),
    ("15 1,2,3 * * *", "Europe/London", "2026-10-24T00:00:00+00:00"),
    ("0 1 * * *", "Europe/London", "2026-10-24T00:00:00+00:00"),
    ("*/10 2 * * *", "Australia/Lord_Howe", "2026-10-03T14:00:00+00:00"),
    ("15 2 * * *", "Australia/Lord_Howe", "2026-10-02T00:00:00+00:00"),
    ("45 1 * * *", "Australia/Lord_Howe", "2026-04-03T00:00:00+00:00"),
    ("0 0 * * *", "America/Havana", "2026-03-06T00:00:00+00:00"),
    ("30 0 * * *", "America/Havana", "2026-10-30T00:00:00+00:00"),
    ("0 0 * * *", "America/Santiago", "2026-09-03T00:00:00+00:00"),
    ("0 9 * * MON-FRI", "Asia/Shanghai", "2026-01-01T00:00:00+00:00"),
    ("0 12 1,15 * 5", "UTC", "2026-01-01T00:00:00+00:00"),
    ("0 0 * * 0", "Europe/Paris", "2026-01-01T00:00:00+00:00"),
    ("0 0 * * 7", "Europe/Paris", "2026-01-01T00:00:00+00:00"),
    ("5 4 * * sun", "Asia/Kolkata", "2026-02-01T00:00:00+00:00"),
    ("0 6 L * *", "UTC", "2026-01-01T00:00:00+00:00"),
    ("@daily", "America/New_York", "2026-03-06T00:00:00+00:00"),
    ("@hourly", "Australia/Lord_Howe", "2026-04-04T13:00:00+00:00"),
    ("0 22 * * 1-5", "Pacific/Auckland", "2026-09-24T00:00:00+00:00"),
    ("0 0 29 2 *", "UTC", "2026-01-01T00:00:00+00:00"),
]

RRULE = [
    ("DTSTART;TZID=America/New_York:20260301T023000\nRRULE:FREQ=DAILY", "2026-03-01T00:00:00+00:00"),
    ("DTSTART;TZID=America/New_York:20261025T013000\nRRULE:FREQ=DAILY;COUNT=14", "2026-10-20T00:00:00+00:00"),
    ("DTSTART;TZID=America/New_York:20261101T000000\nRRULE:FREQ=HOURLY;COUNT=8", "2026-10-31T00:00:00+00:00"),
    ("DTSTART;TZID=America/New_York:20260308T000000\nRRULE:FREQ=HOURLY;COUNT=8", "2026-03-07T00:00:00+00:00"),
    ("DTSTART;TZID=America/New_York:20260308T000000\nRRULE:FREQ=MINUTELY;INTERVAL=20", "2026-03-08T06:30:00+00:00"),
    ("DTSTART;TZID=Europe/London:20260301T010000\nRRULE:FREQ=WEEKLY;BYDAY=SU;BYHOUR=1,2;BYMINUTE=30", "2026-03-01T00:00:00+00:00"),
    ("DTSTART;TZID=Europe/London:20261018T003000\nRRULE:FREQ=HOURLY;INTERVAL=1", "2026-10-24T22:00:00+00:00"),
    ("DTSTART;TZID=Australia/Lord_Howe:20261003T010000\nRRULE:FREQ=MINUTELY;INTERVAL=15;COUNT=40", "2026-10-02T00:00:00+00:00"),
    ("DTSTART;TZID=Australia/Lord_Howe:20260401T014500\nRRULE:FREQ=DAILY;COUNT=10", "2026-03-30T00:00:00+00:00"),
    ("DTSTART;TZID=Europe/London:20260101T090000\nRRULE:FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1;COUNT=12", "2025-12-01T00:00:00+00:00"),
    ("DTSTART;TZID=America/Havana:20260301T000000\nRRULE:FREQ=DAILY;COUNT=14", "2026-02-28T00:00:00+00:00"),
    ("DTSTART;TZID=UTC:20260105T120000\nRRULE:FREQ=WEEKLY;INTERVAL=2;BYDAY=MO,FR;UNTIL=20260601T000000\nEXDATE;TZID=UTC:20260119T120000\nRDATE;TZID=UTC:20260107T080000", "2026-01-01T00:00:00+00:00"),
    ("DTSTART;TZID=Asia/Tokyo:20260131T100000\nRRULE:FREQ=MONTHLY;BYMONTHDAY=-1", "2026-01-01T00:00:00+00:00"),
    ("DTSTART;TZID=America/Santiago:20260901T000000\nRRULE:FREQ=DAILY;BYHOUR=0;BYMINUTE=0,30", "2026-09-04T00:00:00+00:00"),
    ("DTSTART;TZID=Europe/Berlin:20240101T090000\nRRULE:FREQ=YEARLY;BYMONTH=3,10;BYDAY=-1SU;BYHOUR=2;BYMINUTE=30", "2026-01-01T00:00:00+00:00"),
]


def fmt(instants):
    return [i.strftime("%Y-%m-%dT%H:%M:%SZ") for i in instants]


cases = []
for expr, zone, after in CRON:
    cases.append({"schedule": {"cron": expr}, "timezone": zone, "after": after,
                  "expected": fmt(cron_case(expr, zone, after))})
for text, after in RRULE:
    _, zone = strip_zone(text)
    cases.append({"schedule": {"rrule": text}, "timezone": zone, "after": after,
                  "expected": fmt(rrule_case(text, after))})
print(json.dumps({"count": COUNT, "cases": cases}, indent=1))
