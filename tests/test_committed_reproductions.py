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


PRESETS = Path(__file__).resolve().parent.parent / "search_space" / "presets"


@pytest.mark.parametrize(("study", "protocol"), _committed_runs())
def test_no_committed_run_was_affected_by_dropped_fixed_parameters(study, protocol):
    """Issue 37: a search once dropped every fixed or bare-value parameter before its trials ran.
    The committed runs were not affected: their specs (under today's protocol, which the test above
    ties to the committed summary) search ``variant`` and ``seed`` only, both choices, and a
    variant's model fields are applied by the variant itself, a path that never lost a value."""
    from search_space.sampling import build_trial_config, fixed_params
    from search_space.spec import ChoiceDomain, SearchSpec

    (run,) = plan(study, "cpu", 5, (protocol,) if protocol else (), "mnist5k", None)
    spec = SearchSpec.model_validate(run.spec)
    assert fixed_params(spec) == {}
    assert set(spec.params) == {"variant", "seed"}
    assert all(isinstance(domain, ChoiceDomain) for domain in spec.params.values())
    for variant, overrides in spec.variants.items():  # each variant trains the model it names
        model = build_trial_config(spec, {"variant": variant, "seed": 0})["model"]
        for field, value in overrides.items():
            assert model[field] == (list(value) if isinstance(value, tuple) else value), (variant, field)


def test_which_presets_fix_a_parameter_is_known():
    """The shipped presets with a fixed or bare-value parameter (none today): they ran with the base
    model's value before the fix of issue 37, so a preset that gains one is listed here on purpose."""
    import yaml

    from search_space.sampling import fixed_params
    from search_space.spec import SearchSpec

    fixing = {}
    for path in sorted(PRESETS.glob("*.yaml")):
        spec = SearchSpec.model_validate(yaml.safe_load(path.read_text()))
        if fixed_params(spec):
            fixing[path.name] = sorted(fixed_params(spec))
    assert fixing == {}
