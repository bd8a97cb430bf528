"""docs/reproductions/README.md is a page a reader can use (issue 59, deliverable 8).

It is under 20 KB (the history lives in docs/reproductions/CHANGELOG.md, which it links); right after
its title, one table lists every claim of every committed verdicts file with that file's verdict word
and its A - B and 95% interval as the file has them (to the digits shown); and every p-value column
of the README says whether it is one-sided or two-sided.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from harness.reproduce.records import VERDICTS_SUFFIX
from tests.test_reproduction_words import OTHER_WORD, verdict_word

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "reproductions"
README = DOCS / "README.md"
SUFFIX = "-cpu-mnist5k"  # every committed study's name ends so; the first table names it without
MAX_BYTES = 20_000
NUMBER = re.compile(r"[+-]?\d+(?:\.(\d+))?(?:e([+-]?\d+))?$")


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _tables(readme: str) -> list[tuple[int, list[str], list[list[str]]]]:
    """(line of the header, header cells, body rows) of every table of the page."""
    lines = readme.splitlines()
    tables = []
    index = 0
    while index < len(lines):
        if lines[index].startswith("|") and index + 1 < len(lines) and re.fullmatch(r"\|[-:| ]+\|", lines[index + 1]):
            start, header, rows = index, _cells(lines[index]), []
            index += 2
            while index < len(lines) and lines[index].startswith("|"):
                rows.append(_cells(lines[index]))
                index += 1
            tables.append((start, header, rows))
        else:
            index += 1
    return tables


def _committed() -> dict[tuple[str, str], dict]:
    """(study as the first table names it, claim) -> the verdicts file's entry, for every committed file."""
    entries = {}
    for path in sorted(DOCS.glob(f"*{VERDICTS_SUFFIX}")):
        name = path.name[: -len(VERDICTS_SUFFIX)]
        assert name.endswith(SUFFIX), name
        for entry in json.loads(path.read_text()):
            entries[(name[: -len(SUFFIX)], entry["claim"])] = entry
    return entries


def _agrees(shown: str, value: float) -> bool:
    """``shown`` is ``value`` to the digits it shows (half a unit of its last digit either way), or is the
    summary's figure, one digit longer, rounded again (the README's sections quote the summaries: their
    -13.420, 17.135 is the README's [-13.42, +17.14], where 17.1346 alone would read 17.13)."""
    match = NUMBER.match(shown)
    assert match, f"not a number: {shown!r}"
    unit = 10.0 ** (int(match.group(2) or 0) - len(match.group(1) or ""))
    summary_figure = round(value / unit * 10) * unit / 10
    return any(abs(float(shown) - v) <= 0.5 * unit * (1 + 1e-9) for v in (value, summary_figure))


def first_table_problems(readme: str) -> list[str]:
    """What the first table gets wrong against the committed verdicts files, one line each."""
    headings = re.findall(r"^## (.+)$", readme, re.MULTILINE)
    start, header, rows = _tables(readme)[0]
    problems = []
    if not headings or headings[0] != "Current verdicts":
        problems.append(f"the first section is {headings[:1]}, not 'Current verdicts'")
    if start > readme.splitlines().index("## Current verdicts") + 12:
        problems.append("the verdicts table is not right after the title")
    if header[:2] != ["study", "claim"] or "A - B" not in header or "95% CI" not in header or "verdict" not in header:
        problems.append(f"the first table's columns are {header}")
        return problems
    column = {name: header.index(name) for name in ("study", "claim", "A - B", "95% CI", "verdict")}
    committed = _committed()
    seen = set()
    for row in rows:
        key = (row[column["study"]], row[column["claim"]].strip("`"))
        if key not in committed:
            problems.append(f"{key}: no such claim in a committed verdicts file")
            continue
        seen.add(key)
        entry, said = committed[key], row[column["verdict"]]
        if verdict_word(said) != verdict_word(entry["verdict"]):
            problems.append(f"{key}: says {said!r}, the verdicts file {entry['verdict']!r}")
        diff, ci = row[column["A - B"]], row[column["95% CI"]]
        if entry["diff_mean"] is None:
            if (diff, ci) != ("-", "-"):
                problems.append(f"{key}: the file has no difference, the table {diff} {ci}")
            continue
        low_high = re.fullmatch(r"\[(\S+), (\S+)\]", ci)
        if not _agrees(diff, entry["diff_mean"]) or not low_high:
            problems.append(f"{key}: A - B {diff} {ci}, the file {entry['diff_mean']} {entry['ci']}")
        elif not all(_agrees(shown, value) for shown, value in zip(low_high.groups(), entry["ci"], strict=True)):
            problems.append(f"{key}: 95% CI {ci}, the file {entry['ci']}")
    problems += [f"{key}: the first table has no row" for key in sorted(set(committed) - seen)]
    return problems


def test_the_readme_is_under_20_kb_and_links_its_changelog():
    size = len(README.read_bytes())
    assert size < MAX_BYTES, f"docs/reproductions/README.md is {size} bytes: history goes to CHANGELOG.md"
    assert "](CHANGELOG.md)" in README.read_text() and (DOCS / "CHANGELOG.md").is_file()


def test_the_first_table_lists_every_committed_claim_with_its_files_verdict():
    assert len(_committed()) >= 27
    assert first_table_problems(README.read_text()) == []


def test_a_changed_word_number_or_missing_row_in_the_first_table_is_seen():
    """Not vacuous: each row's verdict word changed, its A - B moved by one in its last digit, and a row
    dropped, each in turn, make :func:`first_table_problems` complain."""
    readme = README.read_text()
    start, _, rows = _tables(readme)[0]
    lines = readme.splitlines()
    assert len(rows) >= 27
    for offset, row in enumerate(rows):
        line = start + 2 + offset
        word, _ = verdict_word(row[-1])
        changed = lines[line].replace(f"| {row[-1]} |", f"| {row[-1].replace(word, OTHER_WORD[word], 1)} |")
        assert first_table_problems("\n".join([*lines[:line], changed, *lines[line + 1 :]])), row
        assert first_table_problems("\n".join([*lines[:line], *lines[line + 1 :]])), row
        if row[2] != "-":
            last = int(row[2][-1])
            moved = row[2][:-1] + str(last + 1 if last < 9 else last - 1)
            changed = lines[line].replace(f"| {row[2]} |", f"| {moved} |", 1)
            assert first_table_problems("\n".join([*lines[:line], changed, *lines[line + 1 :]])), row


def test_every_p_column_of_the_readme_says_one_or_two_sided():
    p_columns = [
        (start, cell)
        for start, header, _ in _tables(README.read_text())
        for cell in header
        if re.match(r"p\b", cell.lower())
    ]
    assert len(p_columns) >= 20
    sided = re.compile(r"\b(one|two)-sided")
    unlabelled = [f"line {start + 1}: {cell!r}" for start, cell in p_columns if not sided.search(cell)]
    assert unlabelled == []
