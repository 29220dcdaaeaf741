"""Checks a cron expression the way Carillon's admin nodes read it (the ``carillon-cron``
crate), with the same messages, so ``@job(cron=…)`` refuses at import what a node would
refuse: 5 fields (or an ``@alias``) are Unix cron as the ``croner`` crate reads it, 6 or 7 are
Quartz 2.3 as Carillon's own reader does. Only the checks: the nodes compute the instants.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

MAX_LEN = 512


class CronError(ValueError):
    """Why an expression was refused."""


def problem(expression: str) -> Optional[str]:
    """Why the admin nodes would refuse ``expression``, or ``None`` when they take it."""
    try:
        check(expression)
    except CronError as e:
        return str(e)
    return None


def check(expression: str) -> None:
    """Raises ``CronError`` with the nodes' message when they would refuse ``expression``."""
    expression = expression.strip()
    if not expression:
        raise CronError("is empty")
    if len(expression.encode()) > MAX_LEN:
        raise CronError(
            f"is {len(expression.encode())} characters long; the limit is {MAX_LEN}"
        )
    alias = expression.startswith("@")
    fields = len(expression.split())
    if not alias and fields in (6, 7):
        _quartz(expression)
        return
    if not alias and fields != 5:
        raise CronError(
            f"has {fields} fields; use 5 (Unix: minute hour day-of-month month day-of-week) "
            "or 6–7 (Quartz: seconds first, optional year)"
        )
    _unix(expression)


# --- Unix cron, as croner 4 reads it (seconds and years disallowed, Vixie ranges) ---------

_NONE, _ALL, _LAST, _CLOSEST = 0, 1, 1 << 6, 1 << 7
_NTH = [1 << 1, 1 << 2, 1 << 3, 1 << 4, 1 << 5]
_NTH_ALL = sum(_NTH)

_NICKNAMES = {
    "@YEARLY": "0 0 1 1 *",
    "@ANNUALLY": "0 0 1 1 *",
    "@MONTHLY": "0 0 1 * *",
    "@WEEKLY": "0 0 * * SUN",
    "@DAILY": "0 0 * * *",
    "@HOURLY": "0 * * * *",
}
_WEEKDAY_NAMES = [
    ("-SUN", "-7"), ("SUN", "0"), ("MON", "1"), ("TUE", "2"),
    ("WED", "3"), ("THU", "4"), ("FRI", "5"), ("SAT", "6"),
]
_MONTH_NAMES = [
    ("JAN", "1"), ("FEB", "2"), ("MAR", "3"), ("APR", "4"), ("MAY", "5"), ("JUN", "6"),
    ("JUL", "7"), ("AUG", "8"), ("SEP", "9"), ("OCT", "10"), ("NOV", "11"), ("DEC", "12"),
]


def _component(message: str) -> CronError:
    return CronError(f"Component error: {message.rstrip('.')}")


def _unsigned(text: str, largest: int) -> Optional[int]:
    """Rust's ``from_str`` of an unsigned integer: ASCII digits with an optional leading
    ``+``, at most ``largest``."""
    digits = text[1:] if text.startswith("+") else text
    if not digits or not digits.isascii() or not digits.isdigit():
        return None
    value = int(digits)
    return value if value <= largest else None


def _u16(text: str) -> Optional[int]:
    return _unsigned(text, 0xFFFF)


def _u32(text: str) -> Optional[int]:
    return _unsigned(text, 0xFFFFFFFF)


class _Component:
    def __init__(self, low: int, high: int, features: int) -> None:
        self.low, self.high = low, high
        self.features = features | _ALL | _LAST

    def _set(self, pos: int, bit: int) -> None:
        if pos < self.low or pos > self.high:
            raise _component(
                f"Position {pos} is out of bounds for the current range ({self.low}-{self.high})."
            )
        if self.features & bit != bit:
            raise _component(
                f"Bit 0b{bit:08b} is not supported by the current features 0b{self.features:08b}."
            )

    def _enable(self, feature: int) -> None:
        if self.features & feature != feature:
            raise _component(
                f"Feature 0b{feature:08b} is not supported by the current features "
                f"0b{self.features:08b}."
            )

    def parse(self, field: str) -> None:
        if field == "*":
            return
        for part in field.split(","):
            part = part.strip()
            if not part:
                continue
            if "/" in part:
                self._stepping(part)
            elif "-" in part:
                self._range(part)
            elif "W" in part:
                self._closest_weekday(part)
            elif part == "L":
                self._enable(_LAST)
            else:
                if part.endswith("L") and "#" not in part:
                    part = part.replace("L", "#L")
                if "#" in part and self.features & _NTH_ALL != _NTH_ALL:
                    raise _component("Nth specifier # not allowed in the current field.")
                if "L" in part and self.features & _NTH_ALL != _NTH_ALL:
                    raise _component("L not allowed in the current field.")
                self._number(part)

    @staticmethod
    def _nth_bit(value: str) -> int:
        if value.endswith("L"):
            return _LAST
        if "#" in value:
            nth_text = value[value.index("#") + 1 :]
            nth = _unsigned(nth_text, 0xFF)
            if nth is None:
                raise _component("Invalid nth specifier.")
            if nth == 0 or nth > 5:
                raise _component("Nth specifier out of bounds.")
            return _NTH[nth - 1]
        return _ALL

    def _closest_weekday(self, value: str) -> None:
        day_text = value[: value.index("W")]
        if day_text == "L":
            self._enable(_LAST)
            self._enable(_CLOSEST)
            return
        day = _u16(day_text)
        if day is None:
            raise _component("Invalid day for closest weekday.")
        if day < self.low or day > self.high:
            raise _component("Day for closest weekday out of bounds.")
        self._set(day, _CLOSEST)

    def _range(self, text: str) -> None:
        bit = self._nth_bit(text)
        parts = [p.strip() for p in text.split("#")[0].split("-")]
        if len(parts) != 2:
            raise _component("Invalid range syntax.")
        start, end = _u16(parts[0]), _u16(parts[1])
        if start is None:
            raise _component("Invalid start of range.")
        if end is None:
            raise _component("Invalid end of range.")
        if start > end or start < self.low or end > self.high:
            raise _component("Range out of bounds.")
        for value in range(start, end + 1):
            self._set(value, bit)

    def _number(self, text: str) -> None:
        bit = self._nth_bit(text)
        value = _u16(text.split("#")[0])
        if value is None:
            raise _component("Invalid number.")
        if value < self.low or value > self.high:
            raise _component("Number out of bounds.")
        self._set(value, bit)

    def _stepping(self, text: str) -> None:
        bit = self._nth_bit(text)
        parts = text.split("#")[0].split("/")
        if len(parts) != 2:
            raise _component("Invalid stepped range syntax.")
        range_part, step_text = parts
        step = _u16(step_text)
        if step is None:
            raise _component("Invalid step.")
        if step == 0:
            raise _component("Step cannot be zero.")
        if range_part == "*":
            start, end = self.low, self.high
        elif "-" in range_part:
            bounds = range_part.split("-")
            if len(bounds) != 2:
                raise _component("Invalid range syntax in stepping.")
            first, last = _u16(bounds[0]), _u16(bounds[1])
            if first is None:
                raise _component("Invalid range start.")
            if last is None:
                raise _component("Invalid range end.")
            start, end = first, last
        elif not range_part:
            raise _component(
                f'Invalid step syntax: omitting the starting point like "/{step_text}" is not '
                f'allowed. Use "*/{step_text}" for wildcard steps or "X-Y/{step_text}" for '
                "range steps."
            )
        else:
            raise _component(
                f'Invalid step syntax: single number steps like "{range_part}/{step_text}" are '
                f'not allowed. Use "*/{step_text}" for wildcard steps or "X-Y/{step_text}" for '
                "range steps."
            )
        if start < self.low or end > self.high or start > end:
            raise _component("Range is out of bounds in stepping.")
        for value in range(start, end + 1, step):
            self._set(value, bit)


_BASE_CHARACTERS = set("*/0123456789,-")


def _unix(expression: str) -> None:
    pattern = expression.upper().strip()
    if "@" in pattern:
        pattern = _NICKNAMES.get(pattern, pattern)
    for name, number in _WEEKDAY_NAMES + _MONTH_NAMES:
        pattern = pattern.replace(name, number)
    parts = pattern.split()
    if len(parts) != 5:
        raise CronError("Invalid pattern: Pattern must have 5 fields when seconds are disallowed")
    parts.insert(0, "0")
    parts.append("*")
    for day_field in (3, 5):
        parts[day_field] = parts[day_field].replace("?", "*")
    if parts[5].startswith("+"):
        parts[5] = parts[5][1:]
    for i, part in enumerate(parts):
        allowed = _BASE_CHARACTERS | (set("LW?") if i == 3 else set("#L?") if i == 5 else set())
        for ch in part:
            if ch not in allowed:
                raise CronError(
                    "Pattern contains illegal characters: CronPattern contains illegal "
                    f"character '{ch}' in part '{part}'"
                )
    _Component(0, 59, _NONE).parse(parts[0])
    _Component(0, 59, _NONE).parse(parts[1])
    _Component(0, 23, _NONE).parse(parts[2])
    _Component(1, 31, _LAST | _CLOSEST).parse(parts[3])
    _Component(1, 12, _NONE).parse(parts[4])
    _Component(0, 7, _LAST | _NTH_ALL).parse(parts[5])


# --- Quartz 2.3, as Carillon reads it ----------------------------------------------------

FIRST_YEAR, LAST_YEAR = 1970, 2199
_MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
_WEEKDAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]

# name, low, high, names
_Field = Tuple[str, int, int, List[str]]
SECOND: _Field = ("seconds", 0, 59, [])
MINUTE: _Field = ("minutes", 0, 59, [])
HOUR: _Field = ("hours", 0, 23, [])
DAY_OF_MONTH: _Field = ("day-of-month", 1, 31, [])
MONTH: _Field = ("month", 1, 12, _MONTHS)
DAY_OF_WEEK: _Field = ("day-of-week", 1, 7, _WEEKDAYS)
YEAR: _Field = ("year", FIRST_YEAR, LAST_YEAR, [])


def _hint(field: _Field) -> str:
    name, low, high, _ = field
    if field is MONTH:
        return f"{low}–{high} or JAN–DEC"
    if field is DAY_OF_WEEK:
        return f"{low}–{high} (1 = SUN) or SUN–SAT"
    return f"{low}–{high}"


def _debug(text: str) -> str:
    """Rust's ``{:?}`` of a string, for the ASCII text a field holds."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def _refuse(field: _Field, token: str, why: str) -> CronError:
    return CronError(f"{field[0]} field {_debug(token)}: {why}")


class _Why(Exception):
    """A list item's fault, named with its field and item by the caller."""


def _is_number(text: str) -> bool:
    return bool(text) and text.isascii() and text.isdigit()


def _value(field: _Field, text: str) -> int:
    _, low, high, names = field
    if text in names:
        return low + names.index(text)
    if not _is_number(text):
        raise _Why(f"{_debug(text)} is not a value; use {_hint(field)}")
    value = int(text)
    if value > 0xFFFFFFFF or not low <= value <= high:
        raise _Why(f"{text} is out of range; use {_hint(field)}")
    return value


def _step(field: _Field, text: str) -> int:
    _, low, high, _ = field
    largest = high - low if field is YEAR else high
    step = _u32(text)
    if step is None:
        raise _Why(f"{_debug(text)} after '/' is not a number")
    if step == 0:
        raise _Why("a step of 0 never advances")
    if step > largest:
        raise _Why(f"the step {step} is larger than the field ({largest} at most)")
    return step


def _list_item(field: _Field, item: str) -> None:
    _, low, high, names = field
    range_text, slash, step_text = item.partition("/")
    step = _step(field, step_text) if slash else None
    if range_text == "*" or (not range_text and step is not None):
        pass
    elif "-" in range_text:
        a, _, b = range_text.partition("-")
        if (a in names) != (b in names) and (_is_number(a) or _is_number(b)):
            raise _Why("a range cannot mix a name and a number")
        start, end = _value(field, a), _value(field, b)
        if field is YEAR and start > end:
            raise _Why(f"the range starts after it ends ({start} > {end})")
    else:
        _value(field, range_text)
    # A step after names (MAR-MAY/2) is read as Quartz reads it: the step is dropped.


def _values(field: _Field, text: str) -> None:
    if text == "?":
        raise _refuse(field, text, "'?' is only allowed in day-of-month and day-of-week")
    for item in text.split(","):
        try:
            _list_item(field, item)
        except _Why as why:
            raise _refuse(field, item, str(why)) from None


def _month_days(text: str) -> str:
    """Reads day-of-month; gives ``?``, ``*`` or ``days``."""
    field = DAY_OF_MONTH
    if text == "?":
        return "?"
    if "L" not in text and "W" not in text:
        _values(field, text)
        return "*" if text == "*" else "days"
    if "," in text:
        raise _refuse(
            field, text, "'L' and 'W' days cannot be in a list (Quartz would keep only the first day)"
        )
    if text.startswith("L"):
        rest = text[1:]
        if rest.endswith("W"):
            rest = rest[:-1]
        if rest:
            offset = _u32(rest[1:]) if rest.startswith("-") else None
            if offset is None:
                raise _refuse(field, text, "use L, L-n, LW or L-nW (n from 0 to 30)")
            if offset > 30:
                raise _refuse(field, text, f"L-{offset}: the offset is 30 at most")
        return "days"
    if text.endswith("W"):
        try:
            _value(field, text[:-1])
        except _Why as why:
            raise _refuse(field, text, str(why)) from None
        return "days"
    raise _refuse(field, text, "'L' and 'W' are used as L, L-n, LW, L-nW or nW")


def _week_days(text: str) -> str:
    """Reads day-of-week; gives ``?``, ``*`` or ``days``."""
    field = DAY_OF_WEEK
    if text == "?":
        return "?"
    if text == "L":
        return "days"
    last, nth = "L" in text, "#" in text
    if not last and not nth:
        _values(field, text)
        return "*" if text == "*" else "days"
    if "," in text:
        raise _refuse(
            field, text, "'L' and '#' days cannot be in a list (Quartz would keep only the first day)"
        )
    try:
        if last and text.endswith("L"):
            _value(field, text[:-1])
            return "days"
        day, _, count = text.partition("#")
        _value(field, day)
    except _Why as why:
        raise _refuse(field, text, str(why)) from None
    which = _u32(count)
    if which is None or not 1 <= which <= 5:
        raise _refuse(field, text, "'#' is followed by a number from 1 to 5")
    return "days"


def _quartz(expression: str) -> None:
    # Rust's to_ascii_uppercase: other letters stay as they are.
    parts = "".join(c.upper() if "a" <= c <= "z" else c for c in expression).split()
    month, week = _month_days(parts[3]), _week_days(parts[5])
    if month == "?" and week == "?":
        raise CronError(
            "day-of-month and day-of-week are both '?': one of them must say which days"
        )
    if month != "?" and week != "?" and month != "*" and week != "*":
        raise CronError(
            f"day-of-month {_debug(parts[3])} and day-of-week {_debug(parts[5])} are both "
            "given; Quartz supports one of them: put '?' in the other"
        )
    _values(SECOND, parts[0])
    _values(MINUTE, parts[1])
    _values(HOUR, parts[2])
    _values(MONTH, parts[4])
    if len(parts) == 7:
        _values(YEAR, parts[6])
