"""The README run as a new user runs it (issue 45 item 4): `make demo`'s own recipe, then the tour's
commands in order, then the Python examples the README links to, each as written, from a directory
laid out like the repository.

The one liberty: the quickstart preset there is a smaller copy (4 trials, one epoch, and 256 built-in
synthetic images in place of the 1,438 digits: the export's longer retraining stays seconds; the same
space, sampler, seed, objectives and constraints, and images of the same size and classes, so the same
first proposals: the tour's `export tour 3` and `--where layout=CCCT` find what they find after the real
demo). The demo's recipe is the Makefile's, run by make with this interpreter's environment as its venv,
so a change there (a study name the Python examples do not load) fails here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.store import Store

ROOT = Path(__file__).parents[1]
QUICKSTART = Path("search_space") / "presets" / "quickstart.yaml"
BIN = Path(sys.executable).parent  # the venv's bin: `archsearch` and this python
VENV = BIN.parent


def _section(markdown: str, heading: str) -> str:
    """The text under ``## heading`` (or a deeper heading), up to the next heading of its level."""
    match = re.search(rf"^(#+) {re.escape(heading)}[^\n]*\n", markdown, re.MULTILINE)
    assert match, f"no heading {heading!r}"
    lines, fenced = [], False
    for line in markdown[match.end() :].splitlines(keepends=True):
        fenced ^= line.startswith("```")  # a `# comment` inside a code block is no heading
        if not fenced and re.match(rf"#{{1,{len(match.group(1))}}} ", line):
            break
        lines.append(line)
    return "".join(lines)


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.MULTILINE | re.DOTALL)


def _tour_commands() -> list[str]:
    """Every command line of the README's tour, in order (continuation lines joined)."""
    tour = _section((ROOT / "README.md").read_text(), "A five-minute tour")
    lines = [line.strip() for block in _blocks(tour, "bash") for line in block.replace("\\\n", " ").splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def _anchor(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def _linked_python_examples() -> list[tuple[str, str]]:
    """(page#anchor, code) of each Python example in the manual sections the README links as "From
    Python", in the order the README links them."""
    readme = (ROOT / "README.md").read_text()
    targets = list(dict.fromkeys(re.findall(r"\]\((docs/[\w-]+\.md#from-python[\w-]*)\)", readme)))
    assert len(targets) >= 2, "the README no longer links the manual's Python examples"
    examples = []
    for target in targets:
        page, _, anchor = target.partition("#")
        text = (ROOT / page).read_text()
        heading = next(h for h in re.findall(r"^#+ (.+?) *$", text, re.MULTILINE) if _anchor(h) == anchor)
        blocks = _blocks(_section(text, heading), "python")
        assert blocks, f"{target} has no Python example"
        examples += [(target, code) for code in blocks]
    return examples


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ARCHSEARCH_STORE"}  # the README's default store
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"  # `source .venv/bin/activate`
    return env


def _run(command: list[str] | str, cwd: Path, timeout: float = 480) -> subprocess.CompletedProcess:
    shell = isinstance(command, str)  # a README line, as a shell reads it (quotes, comments)
    done = subprocess.run(
        command, cwd=cwd, env=_env(), shell=shell, executable="/bin/bash" if shell else None,
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    assert done.returncode == 0, f"{command} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def _make_demo(cwd: Path) -> subprocess.CompletedProcess:
    """The Makefile's `demo` recipe, with this interpreter's venv (its install step taken as done)."""
    make = ["make", "--no-print-directory", "-f", str(ROOT / "Makefile"), f"VENV={VENV}", f"BIN={BIN}"]
    return _run([*make, "-o", f"{VENV}/.installed", "demo"], cwd)


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    """A directory after `make demo`: the small preset where the repository keeps it, the demo's store."""
    here = tmp_path_factory.mktemp("readme")
    spec = yaml.safe_load((ROOT / QUICKSTART).read_text())
    spec["search"]["n_trials"] = 4
    spec["data"] = {**spec["data"], "name": "synthetic", "num_classes": 10, "train_size": 256, "val_size": 128}
    spec["training"]["epochs"] = 1
    (here / QUICKSTART).parent.mkdir(parents=True)
    (here / QUICKSTART).write_text(yaml.safe_dump(spec, sort_keys=False))
    done = _make_demo(here)
    assert "Pareto front" in done.stdout and f"report written to {here / 'reports' / 'quickstart.html'}" in done.stdout
    with Store.open(f"sqlite:///{here / 'archsearch.db'}", create=False) as store:
        assert store.study_names() == ["quickstart"]  # the name the manual's Python example loads
    return here


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_tours_commands_run_as_written_after_make_demo(demo):
    commands = _tour_commands()
    assert commands[0].startswith("archsearch models") and any(" export tour 3 " in c for c in commands)
    out = {}
    for command in commands:
        out[command] = _run(command, demo).stdout
    top = next(text for command, text in out.items() if "--sort top1 --limit 5" in command)
    header = top.splitlines()[0].split()
    searched = ["layout", "depths", "dims"]
    assert all(f"config.model.{name}" in header for name in searched) and "config.training.lr" in header
    both = next(text for command, text in out.items() if command.startswith("archsearch pareto quickstart tour"))
    assert {line.split()[0] for line in both.splitlines()[2:-1]} <= {"quickstart", "tour"}
    assert (demo / "reports" / "tour.html").is_file() and (demo / "trial.yaml").is_file()


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_python_examples_the_readme_links_run_as_written_after_make_demo(demo):
    for target, code in _linked_python_examples():
        done = _run([sys.executable, "-c", code], demo)
        assert "completed" in done.stdout, (target, done.stdout[-2000:])


@pytest.mark.slow
def test_a_later_make_demo_takes_a_fresh_name_beside_quickstart(demo, tmp_path):
    """The recipe's test for an existing `quickstart` (its first command): true in the demo's directory,
    so a second `make demo` names its study `quickstart-<date>-<time>`; false before any demo."""
    recipe = re.search(r"^demo:.*?\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.MULTILINE).group(1)
    probe = re.search(r"\bif (.+?); then name=quickstart-", recipe).group(1).replace("$(BIN)", str(BIN))
    assert subprocess.run(probe, shell=True, cwd=demo, env=_env()).returncode == 0
    assert subprocess.run(probe, shell=True, cwd=tmp_path, env=_env()).returncode != 0
    assert not (tmp_path / "archsearch.db").exists()  # the probe reads; it creates no store
