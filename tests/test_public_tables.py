"""Public tabular benchmarks converted to our format (``benchmarks.public_tables``, issue 60 item 5): the
converter keeps every number the public file gives, refuses a file that is not the benchmark's, naming the
entry, writes nothing then, and the committed NAS-Bench-Macro table is the one its README describes."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from benchmarks import public_tables, search_quality
from benchmarks.table import load_table

ROOT = Path(__file__).parents[1]
COMMITTED = ROOT / "benchmarks" / "tables" / "nas-bench-macro-cifar10.csv.gz"


def _macro_json(path: Path, **changes) -> Path:
    """A file in NAS-Bench-Macro's format over its whole space: accuracy and FLOPs grow with the blocks."""
    data = {}
    for digits in itertools.product("012", repeat=public_tables.LAYERS):
        arch = "".join(digits)
        size = sum(int(d) for d in digits)
        data[arch] = {"test_acc": [80 + size] * 3, "mean_acc": 80.0 + size + 0.5 * (arch[0] == "1"), "std": 0.0,
                      "params": 1000 + 10 * size, "flops": 10**6 * (1 + size)}  # fmt: skip
    for arch, entry in changes.items():
        if entry is None:
            del data[arch]
        else:
            data[arch] = entry
    path.write_text(json.dumps(data))
    return path


def test_nas_bench_macro_converts_to_a_table_of_one_epoch_with_its_numbers_and_modelled_seconds(tmp_path, capsys):
    source = _macro_json(tmp_path / "macro.json")
    out = tmp_path / "macro.csv.gz"
    assert public_tables.main(["nas-bench-macro", str(source), "-o", str(out)]) == 0
    assert "6561 configurations" in capsys.readouterr().out
    table = load_table(out)
    assert (len(table), table.epochs) == (6561, 1)
    assert table.param_names == [f"layer{i}" for i in range(1, 9)]
    assert table.domains()["layer1"] == ["identity", "mb3_k3", "mb6_k5"]
    row = table.index_of({f"layer{i}": "identity" if i > 1 else "mb3_k3" for i in range(1, 9)})
    assert table.top1[row, 0] == 81.5 and table.cost["flops"][row] == 2 * 10**6 and table.cost["params"][row] == 1010
    # no times in the public file: one epoch costs 3x the forward multiply-adds of 50,000 images at 1e13/s
    assert table.epoch_s[row, 0] == pytest.approx(3 * 2e6 * 50_000 / 1e13)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"0120": {"mean_acc": 1.0, "flops": 1, "params": 1}}, "'0120' is not a string of 8 digits 0-2"),
        ({"00000003": {"mean_acc": 1.0, "flops": 1, "params": 1}}, "'00000003' is not a string of 8 digits 0-2"),
        ({"00000000": {"mean_acc": 1.0, "params": 1}}, "'00000000' has no flops"),
        ({"00000000": None}, "6560 architectures, expected 6561"),
    ],
)
def test_a_file_that_is_not_nas_bench_macro_is_refused_naming_the_entry_and_nothing_is_written(
    tmp_path, capsys, changes, message
):
    source = _macro_json(tmp_path / "macro.json", **changes)
    out = tmp_path / "macro.csv.gz"
    assert public_tables.main(["nas-bench-macro", str(source), "-o", str(out)]) == 1
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [source]  # no table, no temporary file


def test_the_committed_nas_bench_macro_table_is_the_public_one_its_readme_states():
    """benchmarks/tables/README.md: 6,561 architecture strings x 1 epoch, top-1 45.36-93.13 (CIFAR-10, mean of
    three runs), FLOPs 7.7 M-105.7 M, a true front (top-1 max, FLOPs min) of 66 strings; 3 of them reach 95% of
    its hypervolume under the nadir+10% reference (exact), 7 reach 99% (a greedy bound)."""
    table = load_table(COMMITTED)
    assert (len(table), table.epochs) == (6561, 1)
    assert (round(table.top1.min(), 2), round(table.top1.max(), 2)) == (45.36, 93.13)
    assert (table.cost["flops"].min(), table.cost["flops"].max()) == (7_713_280, 105_660_928)
    truth = search_quality.TrueFront(table, {"top1": "max", "flops": "min"})
    assert len(truth.members) == 66
    at_95, at_99 = truth.oracle(0.95), truth.oracle(0.99)
    assert (len(at_95["members"]), at_95["exact"]) == (3, True)
    assert (len(at_99["members"]), at_99["exact"]) == (7, False)  # 66 members: a greedy bound past 3 of them
