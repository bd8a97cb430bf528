"""The store wraps its driver's errors where they happen (issue 34): a database that fails under a
store call surfaces as one :class:`StoreError` line naming the store (masked) and the call, never
as SQLAlchemy's exception for a caller to classify, and never with a credential."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import SQLAlchemyError

from harness.store import Store, StoreError
from harness.store.errors import StoreDriverError
from harness.store.urls import normalize_url
from tests.conftest import add_small_study


def _drop_epochs_behind_the_stores_back(url: str) -> None:
    engine = create_engine(normalize_url(url))
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE archsearch_epochs"))
    engine.dispose()


def test_a_database_failing_under_a_query_is_one_store_error_line(store_url):
    with Store.open(store_url) as store:
        add_small_study(store)
        _drop_epochs_behind_the_stores_back(store_url)
        with pytest.raises(StoreError) as error:
            store.learning_curves("s")
    assert isinstance(error.value, StoreDriverError)
    assert not isinstance(error.value, SQLAlchemyError) and isinstance(error.value.__cause__, SQLAlchemyError)
    message = str(error.value)
    assert "\n" not in message and "(learning_curves)" in message and message.startswith("the store at ")


def test_a_password_never_reaches_the_wrapped_message(store_url):
    if not store_url.startswith("postgresql"):
        pytest.skip("SQLite has no password")
    from sqlalchemy.engine import make_url

    secret_url = make_url(store_url).set(password="S3cretPW").render_as_string(hide_password=False)
    with Store.open(secret_url) as store:  # trust auth: the password is accepted and ignored
        add_small_study(store)
        _drop_epochs_behind_the_stores_back(store_url)
        with pytest.raises(StoreError) as error:
            store.learning_curves("s")
    assert "S3cretPW" not in str(error.value) and "***" in str(error.value)


def test_a_user_error_of_the_store_is_not_rewrapped(store_url):
    with Store.open(store_url) as store, pytest.raises(StoreError) as error:
        store.study("missing")
    assert not isinstance(error.value, StoreDriverError) and "not found" in str(error.value)


@pytest.mark.parametrize(("url", "env"), [("", None), ("  ", None), (None, "")])
def test_an_empty_store_url_is_an_error_not_the_default_store(url, env, monkeypatch, tmp_path):
    """Found by the adversarial pass of issue 34: `--store ""` silently used ./archsearch.db."""
    from harness.store import resolve_store_url

    monkeypatch.chdir(tmp_path)
    if env is None:
        monkeypatch.delenv("ARCHSEARCH_STORE", raising=False)
    else:
        monkeypatch.setenv("ARCHSEARCH_STORE", env)
    with pytest.raises(StoreError, match="empty"):
        resolve_store_url(url)
    assert not (tmp_path / "archsearch.db").exists()


def test_a_sqlite_url_with_an_option_is_refused_naming_it(tmp_path):
    """Found by the adversarial pass of issue 34: `?bogus=1` was ignored on a write and made a
    read-only open fail as "no such access mode: ro?bogus=1"."""
    for read_only in (False, True):
        with pytest.raises(StoreError, match=r"takes no options, got \?bogus"):
            Store.open(f"sqlite:///{tmp_path / 's.db'}?bogus=1", read_only=read_only)


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_margin_that_is_not_finite_is_refused(value):
    from click.testing import CliRunner

    from harness.cli import main

    result = CliRunner().invoke(main, ["reproduce", "cait-depth", "--margin", value, "--plan"])
    assert result.exit_code == 2 and f"--margin: {value} is not a finite number" in result.output
