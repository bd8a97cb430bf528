"""One ownership check for every directory whose contents are loaded as code, however it was chosen
(issue 57, item 9): the compile cache chosen by ``$ARCHSEARCH_COMPILE_CACHE`` or
``$TORCHINDUCTOR_CACHE_DIR`` (was used unchecked), the default one, ``training.compile_artifacts_dir``
and a study's experiment directory; each refused when it is a symbolic link, writable by others,
another user's, or not a directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.search import experiment_guard
from tests.conftest import tiny_search_spec
from trials import compile_cache, ownership
from trials.compile_artifacts import SharedArtifacts
from trials.configio import ConfigError

EXE = os.path.join(os.path.dirname(sys.executable), "archsearch")


def _unsafe(tmp_path: Path, kind: str) -> Path:
    """A directory (or what stands where one is expected) that is not this user's alone."""
    path = tmp_path / f"cache-{kind}"
    if kind == "writable-by-others":
        path.mkdir()
        path.chmod(0o777)
    elif kind == "symbolic-link":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        path.symlink_to(tmp_path / "elsewhere")
    elif kind == "a-file":
        path.write_text("not a directory")
    elif kind == "another-users":
        if os.getuid() != 0:
            pytest.skip("making a directory of another user needs root")
        path.mkdir(mode=0o700)
        os.chown(path, 12345, 12345)
    return path


KINDS = ["writable-by-others", "symbolic-link", "a-file", "another-users"]


@pytest.mark.parametrize("variable", [ownership.CACHE_ENV, ownership.TORCH_CACHE_ENV])
@pytest.mark.parametrize("kind", KINDS)
def test_a_compile_cache_chosen_through_the_environment_is_checked(tmp_path, monkeypatch, variable, kind):
    for other in (ownership.CACHE_ENV, ownership.TORCH_CACHE_ENV):
        monkeypatch.delenv(other, raising=False)
    monkeypatch.setenv(variable, str(_unsafe(tmp_path, kind)))
    with pytest.raises(ConfigError) as refused:
        compile_cache.cache_dir()
    assert refused.value.field == f"${variable}" and "loaded as code" in str(refused.value)


@pytest.mark.parametrize("kind", KINDS)
def test_compile_artifacts_and_experiment_dirs_get_the_same_check(tmp_path, kind):
    path = _unsafe(tmp_path, kind)
    assert SharedArtifacts(path).usable() is not None
    assert experiment_guard._owned_and_private(path, path.lstat()) == ownership.not_private(path)
    if kind != "a-file":
        assert ownership.not_private(path) is not None


def test_a_private_directory_of_ours_passes_and_is_created_private(tmp_path, monkeypatch):
    monkeypatch.setenv(ownership.CACHE_ENV, str(tmp_path / "new" / "cache"))
    assert compile_cache.cache_dir() == tmp_path / "new" / "cache"
    assert (tmp_path / "new" / "cache").stat().st_mode & 0o777 == 0o700


def test_a_search_with_an_unsafe_cache_directory_is_refused_before_ray_starts(tmp_path):
    spec = tiny_search_spec("owned")
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    env = {**os.environ, ownership.CACHE_ENV: str(_unsafe(tmp_path, "writable-by-others"))}
    done = subprocess.run(
        [EXE, "search", str(tmp_path / "spec.yaml"), "--store", f"sqlite:///{tmp_path / 'store.db'}",
         "--results-dir", str(tmp_path / "results")],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"${ownership.CACHE_ENV}" in done.stderr and "writable by other users" in done.stderr, done.stderr
    assert not (tmp_path / "store.db").exists() and not (tmp_path / "results").exists()
