"""The runs committed in docs/reproductions are there, complete, and match the study they claim to be.

Every study `archsearch reproduce` offers has its `cpu`-scale run on `mnist5k` committed (summary,
report and both figures), each summary's command line is the one that writes it there, its
protocol section is the protocol the code pre-registers today (a study whose definition changed
after its run would otherwise sit beside a stale result), and the README's table links each.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.cli.run_commands import reproduce_command
from harness.reproduce.studies import plan

DOCS = Path(__file__).resolve().parent.parent / "docs" / "reproductions"
STUDIES = reproduce_command.params[0].type.choices  # the click.Choice of `archsearch reproduce STUDY`


def _committed_runs() -> list[tuple[str, str | None]]:
    runs = []
    for study in STUDIES:
        protocols = ("generalisation", "capacity") if study == "coatnet-layouts" else (None,)
        runs.extend((study, protocol) for protocol in protocols)
    return runs


@pytest.mark.parametrize(("study", "protocol"), _committed_runs())
def test_every_study_has_its_cpu_run_committed_with_its_command_and_current_protocol(study, protocol):
    (run,) = plan(study, "cpu", 5, (protocol,) if protocol else (), "mnist5k", None)
    name = run.spec["name"]
    for suffix in (".md", ".html", "-variants.png", "-loss-vs-accuracy.png"):
        assert (DOCS / f"{name}{suffix}").is_file(), f"{name}{suffix} is not committed"
    summary = (DOCS / f"{name}.md").read_text()
    command = re.search(r"^Command: `(.*)`$", summary, re.MULTILINE).group(1)
    assert command.startswith(f"archsearch reproduce {study} --scale cpu --seeds 5")
    assert command.endswith("--output docs/reproductions") and "--dataset mnist5k" in command
    if protocol:
        assert f"--protocol {protocol}" in command
    assert "\n".join(run.protocol.markdown()) in summary, f"{name}.md was run under another protocol"
    assert f"[md]({name}.md)" in (DOCS / "README.md").read_text()
