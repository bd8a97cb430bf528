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
from trials import ownership
from trials.compilation import compile_cache
from trials.compilation.compile_artifacts import SharedArtifacts
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


def _under_unsafe_parent(tmp_path: Path, kind: str) -> Path:
    """A directory of ours, mode 0700, below something others could swap it through."""
    if kind == "world-writable-parent":
        parent = tmp_path / "shared"
        parent.mkdir()
        parent.chmod(0o777)
    elif kind == "another-users-parent":
        if os.getuid() != 0:
            pytest.skip("making a directory of another user needs root")
        parent = tmp_path / "theirs"
        parent.mkdir(mode=0o755)
        os.chown(parent, 12345, 12345)
    else:  # a link, above it, that another user owns (and so may point elsewhere)
        if os.getuid() != 0:
            pytest.skip("making a link of another user needs root")
        (tmp_path / "real").mkdir(mode=0o700)
        parent = tmp_path / "link"
        parent.symlink_to(tmp_path / "real")
        os.lchown(parent, 12345, 12345)
    path = parent / "cache"
    path.mkdir(mode=0o700)
    return path


PARENT_KINDS = ["world-writable-parent", "another-users-parent", "another-users-link-above"]


@pytest.mark.parametrize("kind", PARENT_KINDS)
def test_a_private_directory_below_what_others_may_swap_is_refused(tmp_path, monkeypatch, kind):
    """Only the last component was checked (found by the adversarial pass): a 0700 cache below a
    world-writable directory, another user's, or another user's link was accepted."""
    path = _under_unsafe_parent(tmp_path, kind)
    assert ownership.not_private(path) is None  # the directory itself is ours alone
    assert ownership.unsafe_ancestor(path) is not None
    assert SharedArtifacts(path).usable() is not None
    assert experiment_guard._owned_and_private(path, path.lstat()) is not None
    monkeypatch.setenv(ownership.CACHE_ENV, str(path))
    with pytest.raises(ConfigError, match="above cache"):
        compile_cache.cache_dir()


def test_a_sticky_world_writable_parent_like_tmp_is_fine(tmp_path):
    parent = tmp_path / "sticky"
    parent.mkdir()
    parent.chmod(0o1777)
    path = parent / "cache"
    assert ownership.private_directory(path) is None
