"""The converters' contract and what the pipeline does the same for every format."""

from __future__ import annotations

import polars as pl
import pytest

from syncpace import importers
from syncpace.cli.main import main
from syncpace.errors import ConfigError
from syncpace.importers import FORMATS, Converter, Format, RankFrame, convert, converter


@pytest.mark.parametrize("name", list(FORMATS))
def test_every_built_in_format_is_a_converter(name):
    found = converter(name)
    assert isinstance(found, Converter)
    assert all(isinstance(option, str) for option in found.options)


def test_an_option_a_format_does_not_take_is_one_line(tmp_path):
    with pytest.raises(ConfigError) as err:
        convert("kineto", [tmp_path], tmp_path / "out", world_size=4)
    assert str(err.value) == "import format 'kineto' takes no option 'world_size' (takes: none)"


def test_an_existing_trace_is_refused_before_the_input_is_read(tmp_path, capsys):
    """The output directory is checked first: a conversion of gigabytes does not end in
    'already holds a trace' (here the input would fail too, later)."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "rank-00000.meta.json").write_text("{}")
    missing = tmp_path / "nope"
    with pytest.raises(ConfigError, match="already holds a trace"):
        convert("nccl-inspector", [missing], out)
    assert main(["import", "kineto", str(missing), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "already holds a trace (1 rank files)" in err
    assert (out / "rank-00000.meta.json").read_text() == "{}"  # nothing removed


def test_a_format_name_is_registered_once():
    with pytest.raises(ConfigError, match="'kineto' is already registered"):
        importers.register(Format("kineto", "elsewhere", "something else"))
    assert FORMATS["kineto"].module == "syncpace.importers.kineto"


def test_a_module_without_a_converter_is_not_available(monkeypatch):
    monkeypatch.setitem(FORMATS, "none", Format("none", "syncpace.importers.sources", "-"))
    with pytest.raises(ConfigError, match="'none' is not available in this build"):
        converter("none")
    assert importers.available()["none"] is False


def test_a_rank_frame_names_a_known_step_rule():
    with pytest.raises(ValueError, match="step_rule 'epochs'"):
        RankFrame(rank=0, events=pl.DataFrame(), step_rule="epochs")
