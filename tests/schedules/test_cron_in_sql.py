"""The database's cron check (rara_schedule_cron_problem, db/functions/schedules.sql) accepts
exactly what cronsim, which fires the ticks, accepts, and says what it says: every hand-picked
corner of cronsim's parser, then thousands of expressions drawn from its alphabet. A schedule
stored by any caller is thus one the firing can plan."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

import psycopg
from cronsim import CronSim, CronSimError

from rara.schedules import ticks

CORNERS = [
    "* * * * *",
    "* * * * * *",
    "0 2 * * *",
    "*/5 * * * * *",
    "",
    " ",
    "* * * *",
    "* * * * * * *",
    "60 * * * *",
    "59 23 31 12 7",
    "0 24 * * *",
    "0 0 0 * *",
    "0 0 32 * *",
    "0 0 * 0 *",
    "0 0 * 13 *",
    "0 0 * * 8",
    "0 0 * JAN-MAR MON-FRI",
    "0 0 * jan sun",
    "0 0 * JANUARY *",
    "0 0 * * SUN-SAT",
    "0 0 * * SAT-SUN",
    "5-1 * * * *",
    "1-5/2 * * * *",
    "*/0 * * * *",
    "/5 * * * *",
    "5/ * * * *",
    "5/2/3 * * * *",
    "1,2,,3 * * * *",
    "1, * * * *",
    ",1 * * * *",
    "0 0 L * *",
    "0 0 LW * *",
    "0 0 L/2 * *",
    "0 0 LW/3 * *",
    "0 0 L-5 * *",
    "0 0 1-L * *",
    "0 0 * * 5L",
    "0 0 * * 7L",
    "0 0 * * 8L",
    "0 0 * * L",
    "0 0 * * 05L",
    "0 0 * * 5LL",
    "0 0 * * L5",
    "0 0 * * MON#2",
    "0 0 * * 1#5",
    "0 0 * * 1#6",
    "0 0 * * 1#0",
    "0 0 * * 1#",
    "0 0 * * #2",
    "0 0 * * 1#2/3",
    "0 0 * * 5L/2",
    "0 0 L * 5L",
    "0 0 31 2 *",
    "0 0 30 2 *",
    "0 0 29 2 *",
    "0 0 31 4,6 *",
    "0 0 31 4,5 *",
    "0 0 31 2 MON",
    "0 0 31 2 */2",
    "0 0 30,31 2 *",
    "0 0 */30 2 *",
    "0 0 30-31 4 *",
    "0 0 L 2 *",
    "? * * * *",
    "** * * * *",
    "-5 * * * *",
    "1-2-3 * * * *",
    "00 00 01 01 00",
    "0\t0\n*\v*\f*",
    "0\x1c0 * * *",
    "0 0 * * * \r",
    "99999999999999999999 * * * *",
    "*/99999999999999999999 * * * *",
    "1/99999 * * * *",
    "0 0 * * 7-7",
    "0 0 1 1 1,MON",
    "0 0 * FEB/2 *",
    "0 0 * * SUN#1",
    "0 0 * * SUNDAY",
    "0 0 * * 1-5,L",
    "@daily",
    "@hourly",
    "ſun * * * *",
    "0 0 * * ſun",
    "0 0 * * ﬁri",
    "٣ * * * *",
    "0 0 1 1 ²",
]
NUMBERS = ["0", "1", "2", "5", "7", "8", "12", "13", "23", "24", "29", "30", "31", "59", "60"]
NAMES = ["JAN", "feb", "DEC", "MON", "sun", "SAT", "L", "LW", "W", "X", ""]
# Each field's own values (seconds, minutes, hours, days, months, weekdays): mostly in range.
OWN = [
    ["0", "30", "59"],
    ["0", "15", "59"],
    ["0", "12", "23"],
    ["1", "15", "29", "30", "31"],
    ["1", "2", "4", "12", "JAN", "feb"],
    ["0", "1", "5", "7", "MON", "sun"],
]
JUNK = ["#", "/", "-", ",", "*", "?", "L"]


def _cronsim(expr: str) -> str | None:
    try:
        CronSim(expr, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as exc:
        return str(exc)
    return None


def _python(expr: str) -> str | None:
    """What rara.schedules.ticks says, in cronsim's words (the part after the quoted value)."""
    problem = ticks.cron_problem(expr)
    return None if problem is None else problem.rsplit(": ", 1)[1]


def _database(conn: psycopg.Connection[Any], exprs: list[str]) -> list[str | None]:
    rows = conn.execute(
        "SELECT rara_schedule_cron_problem(e) FROM unnest(%s::text[]) WITH ORDINALITY AS x(e, i)"
        " ORDER BY i",
        (exprs,),
    ).fetchall()
    return [r[0] for r in rows]


def _value(rng: random.Random, field: int) -> str:
    roll = rng.random()
    return rng.choice(OWN[field]) if roll < 0.8 else rng.choice(NUMBERS + NAMES)


def _range(rng: random.Random, field: int) -> str:
    first, last = _value(rng, field), _value(rng, field)
    if first.isdigit() and last.isdigit() and int(last) < int(first) and rng.random() < 0.8:
        first, last = last, first
    return f"{first}-{last}"


def _term(rng: random.Random, field: int) -> str:
    shapes = ["*", "value", "value", "range", "range"]
    shapes += {3: ["L", "LW", "L"], 5: ["nL", "n#"]}.get(field, [])
    shapes += rng.choice([[], [], [], ["nL", "n#", "L", "LW"]])  # where they do not belong
    shape = rng.choice(shapes)
    term = {
        "*": "*",
        "value": _value(rng, field),
        "range": _range(rng, field),
        "L": "L",
        "LW": "LW",
        "nL": f"{_value(rng, field)}L",
        "n#": f"{_value(rng, field)}#{rng.choice(['1', '2', '5', '6'])}",
    }[shape]
    if rng.random() < 0.3:
        term += f"/{rng.choice(['1', '2', '7', '40', '0', ''])}"
    if rng.random() < 0.05:  # a character out of place
        at = rng.randrange(len(term) + 1)
        term = term[:at] + rng.choice(JUNK) + term[at:]
    return term


def _field(rng: random.Random, field: int) -> str:
    if rng.random() < 0.5:
        return "*"
    return ",".join(_term(rng, field) for _ in range(rng.choice([1, 1, 1, 2, 3])))


def _expression(rng: random.Random) -> str:
    count = rng.choice([5, 5, 5, 5, 6, 6, 6, 4, 7])
    fields = [_field(rng, f) for f in range(6 - min(count, 6), 6)][:count]
    return " ".join(fields + ["*"] * (count - len(fields)))


def test_the_corners_of_cronsim_are_judged_alike(conn: psycopg.Connection[Any]) -> None:
    assert _database(conn, CORNERS) == [_python(e) for e in CORNERS]
    ascii_only = [e for e in CORNERS if e.isascii()]
    assert [_python(e) for e in ascii_only] == [_cronsim(e) for e in ascii_only]


def test_drawn_expressions_are_judged_alike(conn: psycopg.Connection[Any]) -> None:
    rng = random.Random(29)
    exprs = [_expression(rng) for _ in range(6000)]
    expected = [_python(e) for e in exprs]
    assert sum(e is None for e in expected) > 800  # enough of them parse to tell
    got = _database(conn, exprs)
    assert [(e, g) for e, g, w in zip(exprs, got, expected, strict=True) if g != w] == []


def test_the_whole_line_is_the_documents(conn: psycopg.Connection[Any]) -> None:
    problem = conn.execute(
        "SELECT rara_schedule_timing_problem(%s, %s)", ("61 * * * *", "Europe/Atlantis")
    ).fetchone()
    assert problem is not None
    assert problem[0] == (
        f"spec.schedule: {ticks.cron_problem('61 * * * *')}\n"
        f"  spec.timeZone: {ticks.zone_problem('Europe/Atlantis')}"
    )
    quoted = ["it's", 'say "x"', "a\\b", "a\tb"]
    got = conn.execute(
        "SELECT array_agg(rara_schedule_quoted(v) ORDER BY i)"
        " FROM unnest(%s::text[]) WITH ORDINALITY AS x(v, i)",
        (quoted,),
    ).fetchone()
    assert got is not None
    assert got[0] == [repr(v) for v in quoted]
