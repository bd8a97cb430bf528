"""``archsearch reproduce``: run a reproduction's grid studies, then write its summaries and reports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dashboards.files import atomic_write
from dashboards.report import write_report
from harness.reproduce.analysis import summarize
from harness.reproduce.studies import plan
from harness.reproduce.summary import markdown_summary, study_figures
from harness.search import run_search
from harness.store import Store
from search_space.validation import load_spec


def reproduce(
    study: str,
    store_url: str,
    *,
    scale: str,
    seeds: int,
    protocols: tuple[str, ...] = ("generalisation", "capacity"),
    dataset: str = "synthetic",
    data_dir: str | None = None,
    address: str | None = None,
    output: Path,
    command: str,
    results_dir: Path | None = None,
    margin: float = 1.0,
    large_margin: float = 5.0,
    run: bool = True,
) -> list[Path]:
    """Run the study's grid searches, then write a Markdown summary and an HTML report for each.

    ``run=False`` writes the summaries and reports again from the store (e.g. with another
    ``margin``) without running anything.
    """
    output.mkdir(parents=True, exist_ok=True)
    written = []
    for spec_dict, protocol, claims, ranking in plan(study, scale, seeds, protocols, dataset, data_dir):
        spec = load_spec(spec_dict, check_paths=address is None)
        if run:
            run_search(spec, store_url, address=address, results_dir=results_dir)
        with Store.open(store_url, create=False) as store:
            store.study(spec.name)  # with run=False: a one-line error if the study was never run
            rows, verdicts, _ = summarize(store, spec.name, protocol, claims, margin=margin, large_margin=large_margin)
            trials = store.trials(spec.name)
            outcomes = {
                str(variant): group["status"].value_counts().to_dict()
                for variant, group in trials.groupby("config.name")
            }
            figures = study_figures(store, spec.name, rows, output)
            summary = output / f"{spec.name}.md"
            text = markdown_summary(spec.name, protocol, rows, verdicts, command, ranking, outcomes)
            text += "".join(f"\n![{title}]({path.name})\n" for title, path in figures)
            atomic_write(summary, text)
            color = "config.model.layout" if spec.family == "coatnet" else "config.model.layer_scale"
            report = write_report(
                store, [spec.name], dict(spec.objectives), output / f"{spec.name}.html", color_by=color
            )
        written += [summary, report, *(path for _, path in figures)]
    return written


def reproduce_coatnet_layouts(store_url: str, **kwargs: Any) -> list[Path]:
    """The CoAtNet layout study (both protocols): ``reproduce("coatnet-layouts", ...)``."""
    return reproduce("coatnet-layouts", store_url, **kwargs)
