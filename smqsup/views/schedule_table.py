"""The schedules as a table for people: what ``smqsup schedules`` lists and
``smqsup status`` shows under its queues (rows of store.schedules.rows)."""

from __future__ import annotations

from typing import Any

from smqsup import safe
from smqsup.config.schedule import duration_text
from smqsup.views.text import cell, local_time


def when_text(r: dict[str, Any]) -> str:
    """cron EXPR or every Ns, from a schedule row."""
    if r.get("cron") is not None:
        return f"cron {r['cron']}"
    every = r.get("every_s")
    return "-" if not isinstance(every, (int, float)) else f"every {duration_text(round(every * 1000))}"


def render(rows: list[dict[str, Any]]) -> str:
    """Schedule rows as an aligned table; its problem under a row that has one."""
    if not rows:
        return "no schedules"
    table = [("schedule", "queue", "when", "zone", "paused", "last fire", "next fire", "declared by", "fires")]
    notes = []
    for r in rows:
        table.append((cell(r["name"]), cell(r["queue"]), cell(when_text(r)), cell(r.get("timezone") or "-"),
                      "paused" if r["paused"] else "-", local_time(r["last_fire"]) if r["last_fire"] else "-",
                      local_time(r["next_fire"]) if r["next_fire"] else "-", str(r["declarers"]),
                      "-" if r["fires"] is None else str(r["fires"])))
        if r.get("error"):
            notes.append(f"  {cell(r['name'])}: {safe.escape(r['error'], 300)}")
        elif not r["declarers"]:
            notes.append(f"  {cell(r['name'])}: no supervisor declares it now: not fired")
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table]
    return "\n".join(lines + notes)
