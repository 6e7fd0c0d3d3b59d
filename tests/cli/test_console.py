"""Commands print tables that stay readable in a file or a CI log."""

from __future__ import annotations

import io

from syncpace.console import PIPE_WIDTH, make_console


def test_output_to_a_file_is_wide_enough_for_the_tables(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    console = make_console(file=io.StringIO())
    assert not console.is_terminal
    assert console.width == PIPE_WIDTH


def test_columns_and_an_explicit_width_are_respected(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    assert make_console(file=io.StringIO()).width == 100
    monkeypatch.delenv("COLUMNS")
    assert make_console(file=io.StringIO(), width=70).width == 70


def test_diagnose_rows_do_not_wrap_when_piped(monkeypatch, capsys):
    from pathlib import Path

    from syncpace.cli.main import main

    monkeypatch.delenv("COLUMNS", raising=False)
    data = Path(__file__).resolve().parents[1] / "data" / "straggler"
    assert main(["diagnose", str(data)]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) > 80  # rich's fallback width
    assert all(len(line) <= PIPE_WIDTH for line in out.splitlines())


def test_a_file_name_with_terminal_escapes_is_printed_escaped(tmp_path, monkeypatch, capsys):
    """The paths the verbs print back are the user's words: a name holding an escape
    sequence (which clears the screen) is written as its escape, never sent raw."""
    from syncpace.cli.main import main

    monkeypatch.chdir(tmp_path)
    name = "\x1b[2J"
    assert main(["simulate", "--nodes", "2", "--steps", "3", "--out", name]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "trace: \\x1b[2J" in out
    assert main(["report", name, "-o", name + ".html"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "wrote \\x1b[2J.html" in out
    assert (tmp_path / (name + ".html")).stat().st_size > 0
