"""The ``archsearch`` command line: the model catalogue."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from harness.cli import main
from trials.models import PRESETS


def test_models_json_lists_every_preset_with_params():
    result = CliRunner().invoke(main, ["models", "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["name"] for r in rows] == list(PRESETS)
    by_name = {r["name"]: r for r in rows}
    assert by_name["cait_xxs24"]["family"] == "cait"
    assert by_name["cait_xxs24"]["params"] == 11_956_264
    assert by_name["coatnet_0"]["params"] == 25_036_820
    assert by_name["coatnet_0"]["config"]["layout"] == "CCTT"


def test_models_table_and_family_filter():
    result = CliRunner().invoke(main, ["models", "--family", "coatnet"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0].split()[:3] == ["name", "family", "image_size"]
    assert {line.split()[0] for line in lines[2:]} == {n for n, c in PRESETS.items() if c.family == "coatnet"}


def test_models_csv():
    result = CliRunner().invoke(main, ["models", "--format", "csv", "--family", "cait"])
    assert result.exit_code == 0
    assert result.output.splitlines()[0] == "name,family,image_size,settings,params_m"


def test_bad_format_is_a_usage_error():
    result = CliRunner().invoke(main, ["models", "--format", "yaml"])
    assert result.exit_code == 2
    assert "yaml" in result.output


def test_console_script_is_installed():
    exe = shutil.which("archsearch", path=str(Path(sys.executable).parent))
    assert exe, "the archsearch console script is not installed next to this Python"
    out = subprocess.run([exe, "models", "--format", "json", "--family", "cait"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert {r["family"] for r in json.loads(out.stdout)} == {"cait"}
