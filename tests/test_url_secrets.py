"""Secrets in any part of a URL (issue 44, pattern 3): every URL archsearch takes (the store, a warm
start's store, a tracking URI) treats the user-info password and every query parameter outside the
harmless connection settings alike: routed to the driver through the environment, masked when printed,
or refused naming the part. The forms are enumerated; a test per URL kind."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from harness.store import StoreError
from harness.store.urls import mask_url, normalize_url, split_secret
from search_space.validation import load_spec
from trials.configio import ConfigError

ROOT = Path(__file__).parents[1]
SECRET = "s3cr3t-VALUE"

# (a URL carrying SECRET, where it hides)
FORMS = [
    (f"postgresql://alice:{SECRET}@db.example:5432/runs", "user info"),
    (f"postgresql://alice:{SECRET}@@db.example/runs", "user info with an unencoded @"),
    (f"postgresql://alice:{SECRET.replace('-', '%2D')}@db.example/runs", "user info, percent-encoded"),
    (f"postgresql://alice@db.example/runs?password={SECRET}", "?password"),
    (f"postgresql://alice@db.example/runs?PASSWORD={SECRET}", "?PASSWORD"),
    (f"postgresql://alice@db.example/runs?sslpassword={SECRET}", "?sslpassword"),
    (f"postgresql://alice@db.example/runs?passfile=/home/{SECRET}", "?passfile"),
    (f"postgresql://alice@db.example/runs?sslmode=require&token={SECRET}", "?token after a harmless one"),
    (f"postgresql://alice@db.example/runs?options=-c%20secret%3D{SECRET}", "?options"),
    (f"postgresql://alice@[::1]:5432/runs?api_key={SECRET}", "IPv6 host, ?api_key"),
    # SQLAlchemy (and so libpq) reads past a '#', where the standard library sees a fragment
    (f"postgresql://alice@db.example/runs?application_name=a#&password={SECRET}", "?password after a #"),
    (f"postgresql://alice@db.example/runs?application_name=a#&sslpassword={SECRET}", "?sslpassword after a #"),
    (f"postgresql://alice@db.example/runs#?password={SECRET}", "a query after a # in the database"),
    (f"postgresql://alice:p#{SECRET}@db.example/runs", "user info with a #"),
    (f"postgresql://alice:{SECRET}/x@db.example/runs", "user info with a / (SQLAlchemy's reading)"),
]


@pytest.mark.parametrize(("url", "where"), FORMS, ids=[w for _, w in FORMS])
def test_a_printed_url_never_shows_the_secret(url, where):
    assert SECRET not in mask_url(url)
    assert SECRET.replace("-", "%2D") not in mask_url(url)


@pytest.mark.parametrize(("url", "where"), FORMS, ids=[w for _, w in FORMS])
def test_a_store_url_routes_its_password_to_the_environment_or_is_refused(url, where):
    try:
        normalize_url(url)
    except StoreError as refused:  # a part with no route off the disk: refused, the secret not echoed
        assert SECRET not in str(refused) and "may carry a secret" in str(refused)
        return
    public, password = split_secret(url)  # what Ray, Optuna and the pickles get: no secret
    assert password is not None and SECRET not in public and SECRET.replace("-", "%2D") not in public


def _spec_with(path: str, value) -> dict:
    spec = copy.deepcopy(yaml.safe_load((ROOT / "search_space" / "presets" / "quickstart.yaml").read_text()))
    node = spec
    *parents, leaf = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value
    return spec


@pytest.mark.parametrize(("url", "where"), FORMS, ids=[w for _, w in FORMS])
def test_a_warm_start_store_url_with_any_secret_is_refused(url, where):
    spec = _spec_with("search.warm_start", {"study": "earlier", "store": url})
    with pytest.raises(ConfigError) as refused:
        load_spec(spec)
    assert refused.value.field == "search.warm_start.store" and SECRET not in str(refused.value)


@pytest.mark.parametrize(
    "query", [f"token={SECRET}", f"api_key={SECRET}", f"sslpassword={SECRET}", f"x=1#&password={SECRET}"]
)
def test_a_tracking_uri_with_a_secret_query_parameter_is_refused(query):
    spec = _spec_with("search.track", {"mlflow": {"tracking_uri": f"https://mlflow.example/?{query}"}})
    with pytest.raises(ConfigError) as refused:
        load_spec(spec)
    assert refused.value.field == "search.track.mlflow.tracking_uri" and SECRET not in str(refused.value)


def test_harmless_connection_settings_pass_and_are_shown():
    url = "postgresql://alice@db.example/runs?sslmode=require&connect_timeout=5"
    normalize_url(url)
    shown = mask_url(url)
    assert "sslmode=require" in shown and "connect_timeout=5" in shown and "***" not in shown


TRACKING_FORMS = [
    f"https://alice:{SECRET}@mlflow.example/",
    f"https://alice:{SECRET}/x@mlflow.example/",
    f"https://mlflow.example/?a=1#&password={SECRET}",
    f"postgresql://alice:{SECRET}@127.0.0.1:5432/test",
    f"postgresql://alice@127.0.0.1:5432/test?application_name=a#&password={SECRET}",
    f"postgresql://alice@127.0.0.1:5432/test#?password={SECRET}",
]


@pytest.mark.parametrize("uri", TRACKING_FORMS)
def test_a_tracking_uri_keeps_no_secret_in_the_stored_spec_or_is_refused(uri, monkeypatch):
    """Whatever reading of the URI finds the secret, the spec that is stored (and pickled to Ray)
    holds none of it: the password is routed to the environment or the URI refused, named."""
    from harness.search.record.trackers import without_secrets

    monkeypatch.delenv("PGPASSWORD", raising=False)
    spec_dict = _spec_with("search.track", {"mlflow": {"tracking_uri": uri}})
    try:
        spec = load_spec(spec_dict)
        public, _ = without_secrets(spec, f"postgresql://alice:{SECRET}@127.0.0.1:5432/test")
    except ConfigError as refused:
        assert refused.field == "search.track.mlflow.tracking_uri" and SECRET not in str(refused)
        return
    assert SECRET not in public.model_dump_json()
