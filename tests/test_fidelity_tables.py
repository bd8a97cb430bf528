"""Tables of one space at several fidelities: rank agreement, the cheap front's worth at the expensive
fidelity, a warm start across fidelities (benchmarks.fidelity_tables), on spaces the project never saw."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from benchmarks import fidelity_tables
from benchmarks.front_quality import Replay, TrueFront
from benchmarks.table import TableError, load_table, restrict, subset
from benchmarks.table_export import main as export_main
from harness.store import Store
from search_space.sampling import build_trial_config, split_params
from search_space.spec import SearchSpec


def _table(path: Path, epochs: int, final, epoch_s: float = 1.0, extra: dict | None = None) -> Path:
    """A 3 x 2 x 2 space (width x kind x lr): FLOPs from width alone (so every width has cost twins);
    ``final(width, kind, lr)`` the last epoch's top-1, reached linearly."""
    rows = []
    for config_id, (width, kind, lr) in enumerate(itertools.product([8, 16, 32], ["a", "b"], [0.1, 0.3])):
        top = final(width, kind, lr)
        for epoch in range(1, epochs + 1):
            rows.append({"config_id": config_id, "epoch": epoch, "top1": round(top * epoch / epochs, 4),
                         "epoch_s": epoch_s, "flops": width * 100, "params": width, "throughput": 1.0,
                         "width": width, "kind": kind, "lr": lr, **(extra or {})})  # fmt: skip
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def _expensive(width, kind, lr):
    return 50 + width + (10 if kind == "a" else 0) + (5 if lr == 0.1 else 0)  # slow lr wins when trained long


def _cheap(width, kind, lr):
    return 50 + width + (10 if kind == "a" else 0) + (5 if lr == 0.3 else 0)  # fast lr wins when trained short


def test_rank_agreement_is_scipys_with_a_seeded_interval_around_it():
    rng = np.random.default_rng(3)
    x = rng.normal(size=30)
    y = x + rng.normal(scale=0.5, size=30)
    first = fidelity_tables.rank_agreement(x, y, seed=1, resamples=300)
    assert first["kendall_tau"] == pytest.approx(stats.kendalltau(x, y).statistic)
    assert first["spearman_rho"] == pytest.approx(stats.spearmanr(x, y).statistic)
    low, high = first["kendall_tau_ci"]
    assert low < first["kendall_tau"] < high < 1
    assert fidelity_tables.rank_agreement(x, y, seed=1, resamples=300) == first  # the same numbers every run
    reversed_ = fidelity_tables.rank_agreement(x, -x, resamples=50)
    assert reversed_["kendall_tau"] == pytest.approx(-1) and reversed_["kendall_tau_ci"] == pytest.approx([-1, -1])
    with pytest.raises(TableError, match="at least 3 pairs"):
        fidelity_tables.rank_agreement([1, 2], [1, 2])


def test_restrict_keeps_a_sub_space_and_names_a_value_it_lacks(tmp_path):
    table = load_table(_table(tmp_path / "t.csv", 2, _cheap))
    sub = restrict(table, {"lr": 0.3, "unknown": 1})  # a name the table does not search is ignored
    assert len(sub) == 6 and sub.param_names == ["width", "kind"]
    assert all(table.params[table.index_of({**p, "lr": 0.3})]["lr"] == 0.3 for p in sub.params)
    assert np.array_equal(sub.top1, table.top1[[i for i, p in enumerate(table.params) if p["lr"] == 0.3]])
    with pytest.raises(TableError, match=r"lr=0\.5 is not a value"):
        restrict(table, {"lr": 0.5})


def test_agreement_counts_the_expensive_front_the_cheap_front_holds(tmp_path):
    """The cheap table prefers the fast lr, the expensive one the slow: on every width the cheap front
    holds the wrong twin, so it holds none of the expensive front, and its hypervolume at the expensive
    fidelity is what the wrong twins give (computed here by hand)."""
    cheap = load_table(_table(tmp_path / "cheap.csv", 2, _cheap))
    expensive = load_table(_table(tmp_path / "expensive.csv", 8, _expensive, epoch_s=2.0))
    row = fidelity_tables.agreement(cheap, expensive)
    assert row["shared"] == 12 and row["epoch_cost_ratio"] == pytest.approx(0.5)
    assert row["expensive_front"] == 3 and row["cheap_front"] == 3  # kind a, one lr, per width
    assert row["expensive_front_in_cheap_front"] == 0
    # expensive front: (73, 800), (89, 1600), (97, 3200)... top-1 = 50 + w + 10 + 5 for lr 0.1
    front = np.array([[50 + w + 15, w * 100] for w in (8, 16, 32)], dtype=float)
    got = np.array([[50 + w + 10, w * 100] for w in (8, 16, 32)], dtype=float)  # the cheap front, trained long
    reference = np.array([front[:, 0].min() - 0.1 * np.ptp(front[:, 0]), front[:, 1].max() + 0.1 * np.ptp(front[:, 1])])

    def volume(points):  # a 2-D staircase, top-1 max, FLOPs min
        area, best = 0.0, reference[0]
        for top, flops in sorted(points.tolist(), key=lambda p: p[1]):
            if top > best:
                area += (top - best) * (reference[1] - flops)
                best = top
        return area

    assert row["expensive_hv_from_cheap_front"] == pytest.approx(volume(got) / volume(front))
    assert row["cost_cheap_then_front"] == pytest.approx(12 * 2 * 0.5 + 3 * 8)
    same = fidelity_tables.agreement(expensive, expensive)
    assert same["expensive_front_in_cheap_front"] == 3 and same["expensive_hv_from_cheap_front"] == 1.0
    assert same["final_top1"]["kendall_tau"] == pytest.approx(1.0)


def test_tables_of_different_spaces_or_nothing_shared_are_refused(tmp_path):
    cheap = load_table(_table(tmp_path / "cheap.csv", 2, _cheap))
    other = load_table(_table(tmp_path / "other.csv", 4, _expensive, extra={"depth": 2}))
    with pytest.raises(TableError, match=r"searches \['kind', 'lr', 'width'\].*one space"):
        fidelity_tables.agreement(cheap, other)
    renamed = pd.read_csv(tmp_path / "cheap.csv").replace({"kind": {"a": "x", "b": "y"}})
    renamed.to_csv(tmp_path / "renamed.csv", index=False)
    with pytest.raises(TableError, match="share 0 configurations"):
        fidelity_tables.agreement(cheap, load_table(tmp_path / "renamed.csv"))


def test_the_found_front_is_what_a_warm_start_enqueues(tmp_path):
    table = load_table(_table(tmp_path / "cheap.csv", 2, _cheap))
    run = Replay()
    for spent, params in enumerate([{"width": 8, "kind": "b", "lr": 0.1}, {"width": 8, "kind": "a", "lr": 0.3},
                                    {"width": 32, "kind": "b", "lr": 0.3}]):  # fmt: skip
        run.complete(table.index_of(params), 2 * (spent + 1))
    assert fidelity_tables.found_front(table, run) == [{"width": 8, "kind": "a", "lr": 0.3},
                                                       {"width": 32, "kind": "b", "lr": 0.3}]  # fmt: skip
    assert fidelity_tables.found_front(table, Replay()) == []


def test_a_race_starts_the_warm_search_after_the_cheap_one_and_enqueues_its_front(tmp_path):
    cheap = load_table(_table(tmp_path / "cheap.csv", 2, _cheap))
    expensive = load_table(_table(tmp_path / "expensive.csv", 4, _expensive))
    half = subset(expensive, [i for i, p in enumerate(expensive.params) if p["lr"] == 0.1])  # lr kept as a column
    curves = fidelity_tables.race_seed(cheap, half, seed=0, workers=2, shares=(0.5,))
    # the cheap search searches the 6 configurations the expensive table holds, not its own 12
    assert curves["warm-0.5-offset"] == pytest.approx(6 * 2 * 0.5, abs=2)
    curves = fidelity_tables.race_seed(cheap, expensive, seed=0, workers=2, shares=(0.5,), ratio=0.5)
    offset = curves["warm-0.5-offset"]
    assert offset == pytest.approx(12 * 2 * 0.5 * 0.5, abs=1)  # half the cheap table, a cheap epoch = 0.5
    assert curves["warm-0.5"].epochs[0] >= offset + 4  # nothing before the cheap search and one trained trial
    assert 1 <= curves["warm-0.5-enqueued"] <= 6
    assert curves["cold"].volume[-1] == pytest.approx(1.0)  # the whole table's budget finds the whole front


def test_the_command_writes_its_json_and_tables_and_refuses_bad_input(tmp_path, capsys):
    cheap = _table(tmp_path / "cheap.csv", 2, _cheap)
    expensive = _table(tmp_path / "expensive.csv", 4, _expensive)
    out = tmp_path / "f.json"
    args = ["--expensive", str(expensive), "--cheap", str(cheap), "--seeds", "2", "--workers", "2"]
    assert fidelity_tables.main([*args, "--fix", "lr=0.3", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["agreement"][0]["shared"] == 6 and set(result["race"]) == {f"{cheap}[lr=0.3]"}
    assert set(result["race"][f"{cheap}[lr=0.3]"]["strategies"]) == {"cold", "warm-0.25", "warm-1.0"}
    printed = capsys.readouterr().out
    assert "| cheap.csv[lr=0.3] (2 epochs) | 6 |" in printed and "warm-started from its front" in printed
    assert fidelity_tables.main([*args, "--epoch-cost", "cheap.csv=0.25", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["agreement"][0]["epoch_cost_ratio"] == 0.25  # set, not measured (1.0)
    for bad in ("cheap.csv=0", "other.csv=1", "cheap.csv"):
        assert fidelity_tables.main([*args, "--epoch-cost", bad, "--json", str(tmp_path / "x.json")]) == 2
        assert "--epoch-cost" in capsys.readouterr().err
    assert fidelity_tables.main([*args, "--fix", "lr", "--json", str(tmp_path / "x.json")]) == 2
    assert fidelity_tables.main([*args, "--fix", "lr=9", "--json", str(tmp_path / "x.json")]) == 2
    assert "lr=9 is not a value" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def _grid_study(store: Store, name: str, layouts: list[str], epochs: int = 2) -> None:
    spec = SearchSpec.model_validate(
        {
            "name": name,
            "family": "coatnet",
            "base_model": "coatnet_tiny32",
            "training": {"epochs": epochs},
            "params": {"layout": {"choice": layouts}, "depths[3]": {"choice": [1, 2]}},
            "objectives": {"top1": "max", "flops": "min"},
            "search": {"sampler": "grid", "n_trials": 2 * len(layouts)},
        }
    )
    store.create_study(name, spec.model_dump(mode="json"), dict(spec.objectives))
    for number, (layout, depth) in enumerate(itertools.product(layouts, [1, 2])):
        params = {"layout": layout, "depths[3]": depth}
        curve = [{"epoch": e, "top1": 10.0 * e + depth, "epoch_time": 1.0} for e in range(1, epochs + 1)]
        cost = {"flops": 100 * depth + len(layout), "params": 1, "throughput": 1.0}
        store.finish_trial(name, number, status="completed", config=build_trial_config(spec, params),
                           parameters=split_params(spec, params), epochs=curve, measurement=cost)  # fmt: skip


def test_several_grids_of_one_space_export_as_one_table(tmp_path, capsys):
    """Two grids whose union is the table (as the fidelity tables are built); a configuration in two of
    them, or grids of another budget, are refused and nothing is written."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with Store.open(url) as store:
        _grid_study(store, "cctt", ["CCTT"])
        _grid_study(store, "cttt", ["CTTT"])
        _grid_study(store, "both", ["CCTT", "CTTT"])
        _grid_study(store, "longer", ["CCCT"], epochs=3)
    out = tmp_path / "t.csv"
    assert export_main(["--store", url, "--study", "cttt", "--study", "cctt", "-o", str(out)]) == 0
    table = load_table(out)
    assert len(table) == 4 and table.param_names == ["layout", "depths[3]"]
    assert table.params[0] == {"layout": "CCTT", "depths[3]": 1} and table.config_ids == [0, 1, 2, 3]
    assert table.top1[table.index_of({"layout": "CTTT", "depths[3]": 2})].tolist() == [12.0, 22.0]
    capsys.readouterr()
    for studies, message in [(["cctt", "both"], "has the same parameters"), (["cctt", "longer"], "one budget")]:
        bad = tmp_path / "bad.csv"
        args = ["--store", url, *[a for s in studies for a in ("--study", s)], "-o", str(bad)]
        assert export_main(args) == 2
        assert message in capsys.readouterr().err
        assert not bad.exists() and not list(tmp_path.glob(".bad*"))


COMMITTED = Path(__file__).resolve().parent.parent / "benchmarks"


def test_the_committed_fidelity_tables_are_their_store_and_hold_what_their_readme_says(tmp_path):
    """Each fidelity table is its committed store's grids exported (byte for byte), a subset of the 8-epoch
    table's lr-3e-3 configurations, holding the 8-epoch front members its README counts."""
    store = f"sqlite:///{COMMITTED / 'tables' / 'stores' / 'fidelity48.db'}"
    grids = {"e32": ["coatnet-mnist5k-e32-cccc-d48", "coatnet-mnist5k-e32-ccct", "coatnet-mnist5k-e32-cccc-d96"],
             "n1000": ["coatnet-mnist5k-n1000-cccc", "coatnet-mnist5k-n1000-ccct"]}  # fmt: skip
    eight = load_table(COMMITTED / "tables" / "coatnet-mnist5k.csv.gz")
    members = [eight.params[i] for i in TrueFront(eight, {"top1": "max", "flops": "min"}).members]
    expected = {"e32": (48, 32, 9), "n1000": (48, 8, 9)}  # configurations, epochs, 8-epoch front members held
    for name, studies in grids.items():
        path = COMMITTED / "tables" / f"coatnet-mnist5k-{name}.csv.gz"
        out = tmp_path / path.name
        assert export_main(["--store", store, *[a for s in studies for a in ("--study", s)], "-o", str(out)]) == 0
        assert out.read_bytes() == path.read_bytes()
        table = load_table(path)
        held = [p for p in members if table.index_of(p) is not None]
        assert (len(table), table.epochs, len(held)) == expected[name]
        assert all(eight.index_of({**p, "lr": 0.003}) is not None for p in table.params)


def test_the_committed_fidelity_results_are_the_commands_and_the_docs_quote_them():
    """benchmarks/results/fidelity.json is what the documented command wrote; docs/benchmarks.md prints its
    tables and the README's "Can I trust a short search?" its sentences, verbatim."""
    root = COMMITTED.parent
    result = json.loads((COMMITTED / "results" / "fidelity.json").read_text())
    assert result["command"] == fidelity_tables.COMMAND
    assert fidelity_tables.COMMAND in (root / "docs" / "benchmarks.md").read_text()
    assert fidelity_tables.render(result) in (root / "docs" / "benchmarks.md").read_text()
    readme = " ".join((root / "README.md").read_text().split())
    assert "## Can I trust a short search?" in readme
    for sentence in fidelity_tables.headline(result):
        assert " ".join(sentence.split()) in readme
