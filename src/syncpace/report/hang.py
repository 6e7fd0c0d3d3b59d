"""A hang or desync, shown first: the group and seq, who is missing, who waits, the stacks.

Self-contained: reads only a :class:`~syncpace.analysis.Finding` of mode ``hang`` or
``desync`` (its evidence, see :mod:`syncpace.analysis.detectors.hang`) and renders it for
the terminal (:func:`print_hang`) or as an HTML section (:func:`hang_html`).
"""

from __future__ import annotations

import html
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from syncpace.analysis import Finding, Role, modes

#: Frames shown per stack (innermost ones).
FRAMES = 8


def stopped(findings: tuple[Finding, ...] | list[Finding]) -> Finding | None:
    """The hang or desync finding (a mode whose role is ``stopped``), if there is one."""
    return next((f for f in findings if modes.has_role(f.mode, Role.STOPPED)), None)


def _ranks(ranks: list[int]) -> str:
    if not ranks:
        return "-"
    return ",".join(map(str, ranks[:16])) + (f" … ({len(ranks)})" if len(ranks) > 16 else "")


def _headline(f: Finding) -> str:
    e = f.evidence
    if "seq" not in e:  # a desync seen in completed calls: no hang point
        return f"DESYNC in group {e.get('group', '?')}"
    size = f", {e['bytes']} B {e['dtype']}" if e.get("bytes") else ""
    waiting, failed = len(e["waiting"]), len(e.get("failed") or [])
    verb = "failed there after waiting" if waiting and failed == waiting else "wait"
    return (
        f"{f.mode.upper()} at {e['op']} seq {e['seq']} of group {e['group']}{size} — "
        f"{waiting} of {len(e['members'])} ranks {verb} since {e['since']} "
        f"({e['waited_s']:.1f} s)"
    )


def _rows(f: Finding) -> list[tuple[str, str]]:
    e = f.evidence
    rows = []
    if e.get("waiting"):
        failed = e.get("failed") or []
        errors = sorted({w["error"] for w in e.get("waiting_detail", []) if w.get("error")})
        note = f" — {len(failed)} failed: {errors[0][:140]}" if failed and errors else ""
        rows.append(("waiting", f"ranks {_ranks(e['waiting'])}{note}"))
    if e.get("completed"):
        rows.append(("completed", f"ranks {_ranks(e['completed'])}"))
    for m in e.get("missing", []):
        host = f" (node {m['host']})" if m.get("host") else ""
        rows.append((f"missing: {m['state']}", f"rank {m['rank']}{host}: {m['doing']}"))
    mismatch = e.get("mismatch")
    if mismatch:
        sides = "; ".join(f"{_ranks(s['ranks'])}: {s['value']}" for s in mismatch["sides"])
        rows.append(("mismatch", f"{mismatch['field']} at seq {mismatch['seq']}: {sides}"))
    skip = e.get("skip")
    if skip and skip.get("counts"):
        counts = ", ".join(f"rank {r}: {n}" for r, n in skip["counts"].items())
        rows.append(("skipped", f"step {skip['step']}: {counts} calls, others {skip['expected']}"))
    for g in e.get("other_groups", [])[:4]:
        rows.append(
            (
                "also stopped",
                f"group {g['group']} seq {g['seq']} {g['op']}: waiting "
                f"{_ranks(g['waiting'])}, missing {_ranks(g['missing'])}",
            )
        )
    return rows


def print_hang(f: Finding, console: Console) -> None:
    """The hang block of the terminal summary."""
    console.print(f"[bold red]{escape(_headline(f))}[/]")
    console.print(escape(f.summary))
    table = Table(show_header=False, box=None, padding=(0, 1))
    table.add_column(style="bold")
    table.add_column()
    for key, value in _rows(f):
        table.add_row(escape(key), escape(value))
    console.print(table)
    for s in f.evidence.get("stacks", []):
        console.print(
            f"[bold]stack of rank {s['rank']}[/] ({escape(s['role'])}: {escape(s['state'])}, "
            f"{escape(s['source'])}):"
        )
        frames = list(zip(s["frames"], s["code"], strict=False))[-FRAMES:]
        for i, (frame, code) in enumerate(frames):
            mark = ">" if i == len(frames) - 1 else " "
            tail = f"    {code}" if code else ""
            console.print(f"  {mark} {escape(frame)}{escape(tail)}")
    console.print("[bold]what to do:[/]")
    for action in f.actions:
        console.print(f"  - {escape(action)}")


def hang_html(f: Finding) -> str:
    """The hang section of the HTML report (rendered above everything else)."""
    e = html.escape
    rows = "".join(f"<tr><td>{e(k)}</td><td>{e(v)}</td></tr>" for k, v in _rows(f))
    stacks = []
    for s in f.evidence.get("stacks", []):
        lines = "\n".join(
            f"{frame}    {code}" if code else frame
            for frame, code in zip(s["frames"], s["code"], strict=False)
        )
        stacks.append(
            f"<h3>stack of rank {s['rank']} ({e(s['role'])}: {e(s['state'])}, "
            f"{e(s['source'])})</h3>"
            f"<pre class='stack'>{e(lines)}</pre>"
        )
    actions = "".join(f"<li>{e(a)}</li>" for a in f.actions)
    return (
        f"<section class='hang' id='hang'><h2>{e(_headline(f))}</h2>"
        f"<p>{e(f.summary)}</p><table class='ev'>{rows}</table>{''.join(stacks)}"
        f"<ul>{actions}</ul></section>"
    )


def hang_json(f: Finding | None, analysis: Any) -> dict[str, Any]:
    """``syncpace hang --json``: the finding (or null) and the measurement under it."""
    return {"finding": f.to_json() if f is not None else None, "hang": analysis.to_json()}
