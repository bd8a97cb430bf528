"""One number formatter (issue 45 item 9): counts in full with separators and no ``.0`` in tables and
messages, the progress line's compact form from the same function, raw numbers in JSON and CSV;
an error line cut at a word, never mid-word."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.cli.common import MAX_ERROR_LINE, one_line
from harness.output import display_width, format_number, render, render_table
from harness.search.record.progress import compact_number
from harness.store import Store
from search_space.validation import load_spec
from trials.configio import ConfigError
from trials.errors import cut_at_word


@pytest.mark.parametrize(
    ("value", "kind", "text"),
    [
        (937806.0, "count", "937,806"), (937806, "count", "937,806"), (24716960.4, "count", "24,716,960"),
        (12, "count", "12"), (4866430.0, "compact", "4.87M"), (999_960, "compact", "1M"), (93.14, "compact", "93.1"),
        (4866430.0, "real", "4,866,430"), (93.1416, "real", "93.1416"), (0.00123, "real", "0.00123"),
        (1e-5, "real", "1e-05"), (4.0, "real", "4"), (float("nan"), "count", "nan"), (float("inf"), "real", "inf"),
        (float("-inf"), "compact", "-inf"),
    ],
)  # fmt: skip
def test_format_number_in_each_kind(value, kind, text):
    assert format_number(value, kind) == text


def test_the_progress_line_uses_the_formatters_compact_kind():
    for value in (4866430.0, 0.5, 2.5e9, -1500, 999_960):
        assert compact_number(value) == format_number(value, "compact")
    with pytest.raises(ValueError, match="unknown number kind"):
        format_number(1, "pretty")


def test_tables_show_params_and_flops_in_full_and_json_and_csv_keep_raw_numbers():
    rows = [{"number": 1234, "params": 937806.0, "flops": 4866430.0, "config.model.flops": 2e6, "top1": 93.14159}]
    table = render(rows, "table").splitlines()[2].split()
    assert table == ["1234", "937,806", "4,866,430", "2,000,000", "93.1416"]  # a trial number is no count
    assert json.loads(render(rows, "json"))[0]["params"] == 937806.0
    assert render(rows, "csv").splitlines()[1] == "1234,937806.0,4866430.0,2000000.0,93.14159"


def test_the_trials_table_and_the_export_message_show_counts_in_full(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with Store.open(url) as store:
        store.create_study("s", {"name": "s"}, {"top1": "max", "flops": "min"})
        config = {"model": {"preset": "cait_tiny32", "depth": 1}, "training": {"epochs": 1}}
        store.finish_trial("s", 0, status="completed", config=config, measurement={"params": 937806.0,
                           "flops": 4866430.0}, final={"top1": 50.0})  # fmt: skip
    runner = CliRunner()
    trials = runner.invoke(main, ["trials", "s", "--store", url])
    assert trials.exit_code == 0, trials.output
    assert "937,806" in trials.output and "4,866,430" in trials.output and "e+06" not in trials.output
    exported = runner.invoke(main, ["export", "s", "0", "-o", str(tmp_path / "t.yaml"), "--store", url])
    assert exported.exit_code == 0, exported.output
    assert "(params 937,806, flops 4,866,430)" in exported.output
    assert "params 937,806, flops 4,866,430" in (tmp_path / "t.yaml").read_text().splitlines()[0]


def test_a_long_error_is_cut_at_a_word_with_dots():
    words = " ".join(f"word{i}" for i in range(300))
    for text, limit in ((words, 400), (words, MAX_ERROR_LINE)):
        cut = cut_at_word(text, limit)
        assert len(cut) <= limit and cut.endswith(" ...")
        assert text.startswith(cut[: -len(" ...")]) and text[len(cut) - len(" ...")] == " "  # a whole word last
    assert one_line(words) == cut_at_word(words, MAX_ERROR_LINE)
    assert cut_at_word("x" * 1000, 50) == "x" * 47 + "..."  # one huge value: cut at the limit
    assert cut_at_word("short", 50) == "short"
    error = ConfigError("model.depth", words)
    assert len(error.message) <= ConfigError.MAX_MESSAGE and error.message.endswith(" ...")


def test_a_spec_key_error_listing_many_fields_ends_on_a_whole_word(monkeypatch):
    spec = {
        "name": "s", "family": "cait", "base_model": "cait_tiny32",
        "data": {"name": "synthetic", "train_size": 64, "val_size": 32}, "training": {"epochs": 1},
        "params": {"bogus": {"choice": [1, 2]}}, "objectives": {"top1": "max"}, "search": {"n_trials": 2},
    }  # fmt: skip

    def message() -> str:
        with pytest.raises(ConfigError) as caught:
            load_spec(spec, check_paths=False)
        return caught.value.message

    cut = message()
    monkeypatch.setattr(ConfigError, "MAX_MESSAGE", 10_000)
    whole = message()
    assert whole.startswith("unknown parameter for family cait") and len(whole) > 400  # the case the issue saw
    head = cut[: -len(" ...")]
    assert cut.endswith(" ...") and len(cut) <= 400 and whole.startswith(head) and whole[len(head)] in " ,)"


def test_a_table_pads_wide_characters_by_the_columns_they_take():
    """A full-width or CJK cell (``ａｂｃ全角``) takes two terminal columns a character: padded by ``len()``, every
    column after it shifted. Each line's column starts where the header's does."""
    rows = [{"layout": "ａｂｃ全角", "top1": 91.5}, {"layout": "CCTT", "top1": 90.25}, {"layout": "é̂", "top1": 1.0}]
    lines = render_table(rows, ["layout", "top1"], kinds={"top1": "real"}).splitlines()
    assert display_width("ａｂｃ全角") == 10 and display_width("é̂") == 1 and display_width("CCTT") == 4
    assert len({display_width(line) for line in lines}) == 1, lines  # every row ends at the header's right edge
