"""The report draws what the registry of modes says: each mode's figure exists, each
figure belongs to a mode, and each mode reads by its registered title."""

from __future__ import annotations

from syncpace.analysis import modes
from syncpace.report import format as fmt
from syncpace.report.finding_figures import FIGURES


def test_every_mode_s_figure_is_drawn_and_every_figure_has_a_mode() -> None:
    for mode in modes.registered():
        if mode.figure is not None:
            assert mode.figure in FIGURES, f"{mode.name}: no figure {mode.figure!r} in FIGURES"
        else:
            assert mode.no_figure.strip(), f"{mode.name}: no figure and no reason"
    used = {m.figure for m in modes.registered()}
    assert set(FIGURES) <= used, f"figures no mode draws: {sorted(set(FIGURES) - used)}"


def test_every_mode_reads_by_its_title() -> None:
    for mode in modes.registered():
        assert fmt.mode_title(mode.name) == mode.title
    assert fmt.mode_title("not_a_mode") == "Not a mode"  # a name no mode has, with spaces
