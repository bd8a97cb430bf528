"""The words docs/reproductions/README.md uses for a verdict are the verdicts files' words.

Every study section of the README under today's protocol (a ``### `` heading that links its summary,
``([summary](NAME.md))``) states verdicts in a table with a ``claim`` and a ``verdict`` column, and
sometimes in prose as ```A > B` **holds**``. Each such statement names a claim of NAME.verdicts.json
and its word (``holds``, ``does not hold``, ``inconclusive``, ``inconclusive after Holm`` with the
unadjusted result in brackets) must be that file's; every claim of the file has a row in its section.
The history subsections (``#### ``, the earlier runs, whose stores are gone) are not recomputable and
are not read. A test below changes each statement's word in turn and checks the comparison fails.

The summaries' generator, and everything under docs/, no longer says that the test split's sampling
error does not enter the differences between variants (issue 48): it does; it is only invisible in
the spread over seeds.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from harness.reproduce.analysis import VariantSummary
from harness.reproduce.records import VERDICTS_SUFFIX
from harness.reproduce.registry import plan
from harness.reproduce.summary import _test_split_error

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "reproductions"
README = DOCS / "README.md"

# The verdict words of dashboards.stats / harness.reproduce.analysis, most specific first.
WORDS = ("inconclusive after Holm", "does not hold", "holds", "inconclusive")
SECTION = re.compile(r"^### .*\(\[summary\]\(([^)]+)\.md\)\)\s*$")
PROSE = re.compile(r"`([^`]+)`\s+\*\*(does not hold|holds|inconclusive)\*\*")
WRONG = ("share the split, so this error does not enter", "does not enter them")


@dataclass(frozen=True)
class Statement:
    study: str  # the summary's name: NAME.md, NAME.verdicts.json
    claim: str
    text: str  # the verdict as the README words it
    line: int  # 0-based line of the README


def verdict_word(text: str) -> tuple[str, str | None]:
    """(word, unadjusted word or None) of a verdict as written: ``**holds**, as ...`` -> ("holds", None);
    ``inconclusive after Holm (holds unadjusted)`` -> ("inconclusive after Holm", "holds")."""
    text = text.replace("**", "").strip()
    for word in WORDS:
        if text.startswith(word):
            unadjusted = None
            if word == "inconclusive after Holm":
                inner = text[len(word) :].strip().lstrip("(").strip()
                unadjusted = next((w for w in ("does not hold", "holds") if inner.startswith(w)), None)
            return word, unadjusted
    raise AssertionError(f"no verdict word ({', '.join(WORDS)}) at the start of {text!r}")


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def statements(readme: str) -> list[Statement]:
    """Every verdict the README's study sections state: table rows and bold prose."""
    lines = readme.splitlines()
    found: list[Statement] = []
    study: str | None = None
    header: list[str] | None = None
    for index, line in enumerate(lines):
        if line.startswith("#"):
            match = SECTION.match(line)
            study = match.group(1) if match else None  # a history subsection or any other: not read
            header = None
            continue
        if study is None:
            continue
        if not line.startswith("|"):
            header = None
            for claim, word in PROSE.findall(line):
                found.append(Statement(study, claim, word, index))
            continue
        cells = _cells(line)
        if header is None:
            header = [c.lower() for c in cells]
            continue
        if set("".join(cells)) <= set("-: "):  # the separator row
            continue
        named = [h for h in header if "claim" in h]
        if not named or "verdict" not in header:
            continue
        claim_cell, verdict = cells[header.index(named[0])], cells[header.index("verdict")]
        for claim in claim_cell.split(", "):
            found.append(Statement(study, claim.strip(" `"), verdict, index))
    return found


def _verdicts(study: str) -> dict[str, dict]:
    path = DOCS / f"{study}{VERDICTS_SUFFIX}"
    assert path.is_file(), f"the README's section links {study}.md, which has no verdicts file"
    return {entry["claim"]: entry for entry in json.loads(path.read_text())}


def mismatches(readme: str) -> list[str]:
    """Each statement whose word differs from its verdicts file's, in one line."""
    wrong = []
    for s in statements(readme):
        committed = _verdicts(s.study)
        if s.claim not in committed:
            wrong.append(f"README line {s.line + 1}: {s.study} has no claim {s.claim!r}")
            continue
        said, said_unadjusted = verdict_word(s.text)
        word, unadjusted = verdict_word(committed[s.claim]["verdict"])
        if said != word or (said_unadjusted is not None and said_unadjusted != unadjusted):
            wrong.append(
                f"README line {s.line + 1}: {s.study} {s.claim!r} says {s.text!r}, "
                f"the verdicts file {committed[s.claim]['verdict']!r}"
            )
    return wrong


def test_the_readme_states_each_verdict_with_its_verdicts_file_word():
    readme = README.read_text()
    found = statements(readme)
    assert {s.study for s in found} == {p.name[: -len(VERDICTS_SUFFIX)] for p in DOCS.glob(f"*{VERDICTS_SUFFIX}")}
    assert mismatches(readme) == []


def test_every_committed_claim_has_a_row_in_its_readme_section():
    lines = README.read_text().splitlines()
    rows = {(s.study, s.claim) for s in statements("\n".join(lines)) if lines[s.line].startswith("|")}
    for path in sorted(DOCS.glob(f"*{VERDICTS_SUFFIX}")):
        study = path.name[: -len(VERDICTS_SUFFIX)]
        for claim in _verdicts(study):
            assert (study, claim) in rows, f"docs/reproductions/README.md states no verdict for {study}: {claim}"


OTHER_WORD = {
    "inconclusive after Holm": "holds",
    "does not hold": "holds",
    "holds": "inconclusive",
    "inconclusive": "holds",
}


def test_a_changed_verdict_word_in_the_readme_fails_the_comparison():
    """Not vacuous: each statement's word changed in turn (the bold in prose, the verdict cell in a
    table, and the unadjusted word after Holm) makes :func:`mismatches` name that line."""
    readme = README.read_text()
    lines = readme.splitlines()
    found = statements(readme)
    assert len(found) >= 21  # the 21 committed claims, at least once each
    for s in found:
        word, unadjusted = verdict_word(s.text)
        edits = [(s.text, s.text.replace(word, OTHER_WORD[word], 1))]
        if unadjusted is not None:
            other = "does not hold" if unadjusted == "holds" else "holds"
            edits.append((s.text, s.text.replace(f"({unadjusted}", f"({other}", 1)))
        for old, new in edits:
            assert old in lines[s.line] and old != new
            changed = [*lines[: s.line], lines[s.line].replace(old, new, 1), *lines[s.line + 1 :]]
            wrong = mismatches("\n".join(changed))
            assert any(f"README line {s.line + 1}:" in w for w in wrong), f"changing {old!r} to {new!r} went unseen"


def test_a_claim_the_verdicts_file_lacks_is_refused():
    readme = README.read_text().replace("| 6+2 > 6+0 |", "| 6+2 > 6+1 |", 1)
    assert any("has no claim '6+2 > 6+1'" in w for w in mismatches(readme))


def test_no_doc_and_no_generator_says_the_test_split_error_does_not_enter_differences():
    places = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").rglob("*.md"))]
    places += sorted((ROOT / "harness").rglob("*.py")) + sorted((ROOT / "dashboards").rglob("*.py"))
    for path in places:
        text = path.read_text()
        for wrong in WRONG:
            assert wrong not in text, f"{path.relative_to(ROOT)} says the test split's error {wrong!r}"
    (run,) = plan("cait-depth", "cpu", 7, (), "mnist5k", None)
    row = VariantSummary("d12-layerscale", 6e5, 4.5e7, "final test top-1", 47.1, 40.8, 53.5, 7, test_top1=47.1)
    written = " ".join(_test_split_error([row], run.protocol))
    assert "population-level difference between variants" in written
    assert "invisible in the spread over seeds" in written and "seed x image bootstrap" in written
    assert not any(wrong in written for wrong in WRONG)
    tail = written[written.index("binomial standard error") :]
    for summary in sorted(DOCS.glob("*.md")):
        if "Test split:" in summary.read_text():  # every committed summary says what the generator says now
            assert tail in summary.read_text(), f"{summary.name}: regenerate it (its test-split sentence is old)"
