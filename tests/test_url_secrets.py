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


@pytest.mark.parametrize("query", [f"token={SECRET}", f"api_key={SECRET}", f"sslpassword={SECRET}"])
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
