"""Adversarial pass of issue 44, D4 and D6: every usage error is one line, capped and escaped at one
place (``harness.cli.common.UsageError``), whatever value it quotes: a 100,000-character option value,
or a study name held in the store with a terminal escape in it."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.cli.common import MAX_ERROR_LINE
from harness.store import Store

HUGE = "n" * 100_000


@pytest.fixture
def store_url(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    with Store.open(url) as store:
        store.create_study("ok", {"name": "ok"}, {"top1": "max", "flops": "min"})
        store.create_study("evil\x1b]0;PWN\x07z", {"name": "evil"}, {"top1": "max", "flops": "min"})
    return url


@pytest.mark.parametrize(
    "args",
    [
        ["trials", "ok", "--sort", HUGE],
        ["pareto", "ok", "--objectives", f"{HUGE}:max,flops:min"],
        ["pareto", "ok", "--where", f"{HUGE}=1"],
        ["report", "ok", "-o", f"/nonexistent/{'d' * 6000}/x.html"],
        ["trials", "unknown-study"],  # the line lists the store's names: one holds an escape
    ],
    ids=["sort", "objectives", "where", "output-path", "store-held-name"],
)
def test_a_usage_error_is_one_capped_escaped_line(store_url, args):
    done = CliRunner().invoke(main, [*args, "--store", store_url])
    assert done.exit_code == 2, done.output[:500]
    lines = done.output.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) <= MAX_ERROR_LINE + len("Error: "), len(lines[0])
    assert "\x1b" not in done.output and "\x07" not in done.output
