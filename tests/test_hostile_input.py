"""What a user on a shared cluster throws at archsearch: alias bombs, bad URLs and numbers, unwritable
outputs, failures half-way through writing a report. Each is one line and the right exit code, and
nothing is left half-written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import add_small_study

from harness.cli import main
from harness.store import Store

OBJECTIVES = {"top1": "max", "flops": "min"}


def _invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def _one_line(result) -> str:
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert len(lines) == 1, result.output[-2000:]
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return lines[0]


@pytest.fixture
def study_store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with Store.open(url) as store:
        add_small_study(store)
        store.create_study("empty", {"name": "empty"}, OBJECTIVES)
    return url


# -- YAML ------------------------------------------------------------------------------------------


def test_a_yaml_alias_bomb_is_refused_at_load_naming_the_key(tmp_path):
    levels = ["  a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    for i in range(1, 8):
        prev, cur = chr(ord("a") + i - 1), chr(ord("a") + i)
        levels.append(f"  {cur}: &{cur} [" + ", ".join([f"*{prev}"] * 10) + "]")
    spec = tmp_path / "bomb.yaml"
    spec.write_text("name: bomb\nfamily: cait\nbase_model: cait_tiny32\nobjectives: {top1: max}\nparams:\n")
    spec.write_text(spec.read_text() + "\n".join(levels) + "\n")
    assert spec.stat().st_size < 1000
    result = _invoke("search", str(spec), "--store", f"sqlite:///{tmp_path / 's.db'}")
    assert result.exit_code == 2
    line = _one_line(result)
    assert line.startswith("Error: params.h:") and "expand to more than 100,000 elements" in line
    assert not (tmp_path / "s.db").exists()


def test_yaml_aliases_within_the_bound_still_load():
    from trials.yaml_bounds import safe_load_bounded

    assert safe_load_bounded("a: &x {lr: 0.1}\nb: *x\n") == {"a": {"lr": 0.1}, "b": {"lr": 0.1}}


def test_error_lines_are_capped_whatever_value_they_quote(tmp_path):
    spec = tmp_path / "long.yaml"
    spec.write_text(
        "name: long\nfamily: cait\nbase_model: cait_tiny32\nobjectives: {top1: max}\n"
        f"params:\n  embed_dim: {{choice: [{', '.join(['100'] * 20000)}]}}\n  num_heads: 8\n"
    )
    result = _invoke("search", str(spec), "--store", f"sqlite:///{tmp_path / 's.db'}")
    assert result.exit_code == 2
    assert len(_one_line(result)) <= 620


# -- store URLs and numbers ------------------------------------------------------------------------


def test_a_store_url_with_a_non_numeric_port_is_one_line():
    result = _invoke("studies", "--store", "postgresql://u:pw@db-host:fivefourthreetwo/db")
    assert result.exit_code == 2
    line = _one_line(result)
    assert "the port must be a number" in line and "pw" not in line.replace("password", "")


def test_an_enormous_limit_is_a_usage_error(study_store):
    result = _invoke("trials", "s", "--store", study_store, "--limit", "99999999999999999999")
    assert result.exit_code == 2 and "--limit" in result.output and "Traceback" not in result.output


def test_a_studys_objective_sorts_before_any_trial_recorded_it(study_store):
    result = _invoke("trials", "empty", "--store", study_store, "--sort", "top1")
    assert result.exit_code == 0, result.output
    assert "unknown metric" not in result.output


# -- reports: unwritable places, and failures half-way ---------------------------------------------


@pytest.mark.parametrize("where", ["file-as-dir", "proc"])
def test_a_report_into_a_place_that_cannot_hold_it_is_one_line(study_store, tmp_path, where):
    if where == "file-as-dir":
        (tmp_path / "plain.txt").write_text("x")
        output = str(tmp_path / "plain.txt" / "report.html")
    else:
        output = "/proc/archsearch-report.html"  # not writable, even for root
    result = _invoke("report", "s", "--store", study_store, "-o", output)
    assert result.exit_code == 2
    assert _one_line(result).startswith("Error: cannot write the report to")


def test_a_report_that_fails_half_way_leaves_the_previous_one_intact(study_store, tmp_path, monkeypatch):
    import dashboards.files

    output = tmp_path / "r.html"
    assert _invoke("report", "s", "--store", study_store, "-o", str(output)).exit_code == 0
    good = output.read_bytes()
    assert len(good) > 10_000

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(dashboards.files.os, "fsync", disk_full)
    result = _invoke("report", "s", "--store", study_store, "-o", str(output), "--png", str(tmp_path / "png"))
    assert result.exit_code == 2 and "No space left on device" in _one_line(result)
    assert output.read_bytes() == good  # the previous report, byte for byte
    leftovers = [p for p in tmp_path.rglob(".*.tmp")]
    assert leftovers == []


def test_written_files_get_the_usual_mode(tmp_path):
    from dashboards.files import atomic_write

    path = atomic_write(tmp_path / "x.txt", "hello")
    umask = os.umask(0)
    os.umask(umask)
    assert path.read_text() == "hello" and (path.stat().st_mode & 0o777) == (0o666 & ~umask)


# -- issue 34: names, store paths and secrets --------------------------------------------------------


@pytest.mark.parametrize(("name", "shown"), [("", "''"), ("a/../b", "'a/../b'")])
def test_a_bad_resume_name_is_blamed_on_resume_in_one_line(tmp_path, name, shown):
    result = _invoke("search", "--resume", name, "--store", f"sqlite:///{tmp_path / 's.db'}")
    assert result.exit_code == 2
    assert _one_line(result).startswith(f"Error: --resume: {shown} is not a valid study name")


def test_a_store_path_that_is_a_fifo_or_a_directory_is_refused_not_waited_on(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir.db").mkdir()
    for path, said in ((tmp_path / "fifo", "is not a regular file"), (tmp_path / "dir.db", "is a directory")):
        for command in (["studies"], ["search", "--resume", "x"]):
            result = _invoke(*command, "--store", f"sqlite:///{path}")
            assert result.exit_code == 2 and said in _one_line(result), result.output


def test_a_relative_sqlite_path_says_four_slashes_when_the_absolute_one_exists(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    absolute = tmp_path / "x.db"
    Store.open(f"sqlite:///{absolute}").close()
    result = _invoke("studies", "--store", f"sqlite://{absolute}")  # three slashes: relative to the cwd
    assert result.exit_code == 2 and "an absolute path takes four slashes" in _one_line(result)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:S3cret@PW5@127.0.0.1:5432/nodb",  # an unencoded '@' in the password
        "sqlite:///{tmp}/garbage.db?password=S3cret",  # SQLite echoed the query in its error
    ],
)
def test_no_part_of_a_password_reaches_a_message(tmp_path, url):
    (tmp_path / "garbage.db").write_text("not a database")
    result = _invoke("studies", "--store", url.format(tmp=tmp_path))
    line = _one_line(result)
    assert result.exit_code == 2 and "S3cret" not in line and "PW5" not in line and "***" in line


def test_verify_refuses_a_device_it_cannot_use_and_a_member_that_no_longer_builds(tmp_path):
    """Each was a traceback (torch's RuntimeError, ModelConfigError); now one line, exit 2."""
    import json
    import sqlite3

    from search_space.sampling import build_trial_config
    from search_space.spec import SearchSpec

    base = {"preset": "cait_tiny32", "embed_dim": 32, "num_heads": 2}
    spec = SearchSpec.model_validate({"name": "v", "family": "cait", "base_model": base, "objectives": OBJECTIVES})
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with Store.open(url) as store:
        store.create_study("v", spec.model_dump(mode="json"), OBJECTIVES)
        config = build_trial_config(spec, {})
        cost = {"flops": 1000, "params": 10, "image_size": 32, "batch_size": 2}
        store.finish_trial("v", 0, status="completed", config=config, final={"top1": 50.0}, measurement=cost)
    for device, said in (("cuda:7", "--device cuda:7: no CUDA device"), ("cpu; rm -rf /", "is not a device")):
        result = _invoke("verify", "v", "--store", url, "--device", device, "--repeats", "1")
        assert result.exit_code == 2 and said in _one_line(result)
    database = sqlite3.connect(tmp_path / "store.db")
    broken = {**config, "model": {**config["model"], "num_heads": 3}}  # 32 is not divisible by 3
    database.execute("update archsearch_trials set config = ?", (json.dumps(broken),))
    database.commit()
    result = _invoke("verify", "v", "--store", url, "--device", "cpu", "--repeats", "1")
    assert result.exit_code == 2
    assert "trial 0's stored config no longer builds here" in _one_line(result) and "num_heads 3" in result.output


def test_a_layer_scale_beyond_any_residual_scale_is_refused_at_validation():
    from trials.models.build import resolve_config
    from trials.models.config import ModelConfigError

    with pytest.raises(ModelConfigError, match="is above 1000"):
        resolve_config({"preset": "cait_tiny32", "layer_scale": 1e300})


def test_a_spec_that_is_a_fifo_or_a_device_is_named_as_such_not_missing(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    for path in (tmp_path / "fifo", Path("/dev/zero")):
        result = _invoke("search", str(path), "--store", f"sqlite:///{tmp_path / 's.db'}")
        assert result.exit_code == 2 and "is not a regular file" in _one_line(result)
    assert not (tmp_path / "s.db").exists()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--dataset", "../../etc"], "--dataset: 'cait-depth-tiny-../../etc' is not a valid study name"),
        (["--dataset", "imagefolder", "--data-dir", "/nonexistent"], "data.data_dir: /nonexistent does not exist"),
    ],
)
def test_a_plan_the_run_would_refuse_is_refused(args, said):
    result = _invoke("reproduce", "cait-depth", "--plan", *args)
    assert result.exit_code == 2 and said in _one_line(result)


def test_a_report_with_a_long_legal_file_name_is_written(tmp_path, study_store):
    name = "r" * 245 + ".html"  # 250 characters: legal; the temporary name must not overflow it
    result = _invoke("report", "s", "--store", study_store, "-o", str(tmp_path / name))
    assert result.exit_code == 0, result.output
    assert (tmp_path / name).stat().st_size > 0


def test_an_infinite_plateau_gain_is_refused():
    from search_space.spec import SearchSettings

    with pytest.raises(ValueError, match="finite"):
        SearchSettings.model_validate({"stop": {"hypervolume_plateau": {"window": 5, "min_gain": float("inf")}}})


def test_a_database_holding_another_applications_archsearch_studies_table_is_left_alone(store_url):
    """Issue 34: Alembic failed with DuplicateTable (PostgreSQL) and `studies` said "no archsearch
    tables"; now one line names the foreign table, and it is not written (SQLite and PostgreSQL)."""
    from sqlalchemy import create_engine, text

    from harness.store import StoreError

    engine = create_engine(store_url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE archsearch_studies (id INTEGER PRIMARY KEY, theirs TEXT)"))
        conn.execute(text("INSERT INTO archsearch_studies VALUES (1, 'payroll')"))
    for command in (["studies"], ["trials", "x"]):
        result = _invoke(*command, "--store", store_url)
        assert result.exit_code == 2 and "archsearch_studies but no archsearch_alembic_version" in _one_line(result)
    with pytest.raises(StoreError, match="another application's"):
        Store.open(store_url)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT theirs FROM archsearch_studies")).scalar() == "payroll"
        assert "archsearch_trials" not in {r[0] for r in conn.execute(text(
            "SELECT table_name FROM information_schema.tables" if "postgresql" in store_url else
            "SELECT name FROM sqlite_master WHERE type = 'table'"))}  # fmt: skip
    engine.dispose()


def test_a_spec_or_store_name_that_is_not_utf8_is_refused_before_ray_starts(tmp_path):
    """Issue 34: Ray's worker start failed with UnicodeEncodeError on such a command line."""
    import subprocess
    import sys

    exe = os.path.join(os.path.dirname(sys.executable), "archsearch")
    spec = os.fsencode(tmp_path) + b"/\xff.yaml"
    Path(os.fsdecode(spec)).write_text("name: x\nfamily: cait\nobjectives: {top1: max}\n")
    for args in ([spec, b"--store", os.fsencode(f"sqlite:///{tmp_path / 's.db'}")],
                 [b"--resume", b"x", b"--store", os.fsencode(f"sqlite:///{tmp_path}") + b"/\xfe.db"]):  # fmt: skip
        done = subprocess.run([exe, "search", *args], capture_output=True, timeout=120)
        err = done.stderr.decode(errors="replace")
        assert done.returncode == 2 and "is not valid UTF-8 (Ray cannot take it)" in err and "Traceback" not in err
        assert "\\xff" in err or "\\xfe" in err


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("name: a\nname: b\nfamily: cait\nobjectives: {top1: max}\n", "duplicate key 'name' (lines 1 and 2)"),
        ("name: a\nfamily: cait\nobjectives: {top1: max}\nparams:\n  depth: {choice: [1]}\n  depth: {choice: [3]}\n",
         "duplicate key 'depth' under 'params' (lines 5 and 6)"),
    ],
)  # fmt: skip
def test_a_key_written_twice_is_refused_not_silently_overwritten(tmp_path, text, said):
    """A fresh adversarial case (issue 34): YAML keeps the last of two equal keys, and a search ran
    under the second name as if the first were not there."""
    (tmp_path / "spec.yaml").write_text(text)
    result = _invoke("search", str(tmp_path / "spec.yaml"), "--store", f"sqlite:///{tmp_path / 's.db'}")
    assert result.exit_code == 2 and said in _one_line(result)
    assert not (tmp_path / "s.db").exists()


def test_a_trial_on_a_device_this_machine_lacks_is_refused_before_it_runs(tmp_path):
    """Fresh adversarial case: `device: cuda` on a CPU machine ran and failed deep in torch."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    (tmp_path / "t.yaml").write_text("name: t\nmodel: cait_tiny32\ndevice: cuda\ntraining: {epochs: 1}\n")
    result = _invoke("trial", str(tmp_path / "t.yaml"))
    assert result.exit_code == 2 and _one_line(result) == "Error: device: cuda: no CUDA device on this machine"


def test_a_png_folder_that_cannot_be_made_is_named_not_the_report(tmp_path, study_store):
    result = _invoke("report", "s", "--store", study_store, "-o", str(tmp_path / "r.html"), "--png", "/proc/x")
    assert result.exit_code == 2 and ": /proc/x: " in _one_line(result)
