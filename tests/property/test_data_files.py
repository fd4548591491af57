"""Every shipped data file validated on load (issue 40, item 2): the real file with one value anywhere in it made
hostile (a wrong type, a word for a number, infinity, a huge or negative number, a list for a mapping, the key
deleted) either still loads or is one ConfigError line naming the file, and the line wherever the value has one;
never a TypeError or ValueError from deep inside a stage (the CLI's exit 70, "internal error").

Unlike tests/property/test_outside_input.py, which feeds whole random documents (mostly refused at the top), this walks
the shipped files' own structure, so every key's reader is reached. ``ROCKBUILD_HYPOTHESIS_EXAMPLES`` sets how many
mutations per file (default 150; derandomized, so CI is repeatable)."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rockbuild.bundle.policy import load_policy
from rockbuild.core.data import data_path
from rockbuild.core.errors import ConfigError
from rockbuild.core.jobs import load_families
from rockbuild.core.programs import load_programs
from rockbuild.matrix import load_matrix
from rockbuild.publish.config import load_publish_config
from rockbuild.publish.image import load_images_config
from rockbuild.rocm.channels import load_channels
from rockbuild.smoke.baselines import load_baselines
from rockbuild.smoke.config import load_smoke_config
from rockbuild.smoke.models import default_model_pin, packaged_models, tiny_spec
from rockbuild.smoke.runner import SmokeOptions

EXAMPLES = int(os.environ.get("ROCKBUILD_HYPOTHESIS_EXAMPLES", "150"))
PROFILE = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def smoke(path: Path) -> None:
    """smoke.yaml loaded, and every reader of a section that runs later given what the load let through."""
    config = load_smoke_config(path)
    default_model_pin(config)
    packaged_models(config)
    tiny_spec(config)
    SmokeOptions.from_config(config)
    SmokeOptions.from_config(config, bench_preset="gpu")


LOADERS: dict[str, Callable[[Path], Any]] = {
    "families.yaml": load_families,
    "bundle-policy.yaml": load_policy,
    "smoke.yaml": smoke,
    "publish.yaml": load_publish_config,
    "rocm-channels.yaml": load_channels,
    "programs.yaml": load_programs,
    "baselines.yaml": load_baselines,
    "images.yaml": load_images_config,
    "nightly.yaml": lambda path: load_matrix(path, load_families()),
}
DELETE = object()  # the key (or list item) removed
HOSTILE = (
    st.sampled_from(
        [
            None,
            "",
            "many",
            "soon",
            "gfx9999",
            "../../etc/passwd",
            -1,
            0,
            10**30,
            -(10**30),
            1.5,
            math.inf,
            -math.inf,
            math.nan,
            True,
            False,
            [],
            {},
            [None],
            {"x": None},
            [1],
            DELETE,
        ]
    )
    | st.integers()
    | st.floats()
    | st.text(max_size=8)
    | st.lists(st.integers() | st.text(max_size=4), max_size=3)
    | st.dictionaries(st.text(max_size=6), st.integers() | st.none(), max_size=2)
)


def test_every_shipped_data_file_is_covered():
    shipped = {p.name for p in data_path("config", "nightly.yaml").parent.glob("*.yaml")}
    assert shipped == set(LOADERS), "a data file without its property test (or a test of a file that is gone)"


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_every_shipped_data_file_loads_as_shipped(name):
    LOADERS[name](data_path("config", name))


def places(node: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path into a YAML document: each mapping value and each list item, depth first."""
    if at:
        yield at
    if isinstance(node, dict):
        for key, value in node.items():
            yield from places(value, (*at, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from places(value, (*at, i))


def mutated(doc: Any, at: tuple[Any, ...], value: Any) -> Any:
    parent = doc
    for step in at[:-1]:
        parent = parent[step]
    if value is DELETE:
        del parent[at[-1]]
    else:
        parent[at[-1]] = value
    return doc


@pytest.mark.parametrize("name", sorted(LOADERS))
@PROFILE
@given(data=st.data())
def test_one_hostile_value_anywhere_loads_or_is_one_config_line(tmp_path_factory, name, data):
    shipped = data_path("config", name)
    doc = yaml.safe_load(shipped.read_text(encoding="utf-8"))
    at = data.draw(st.sampled_from(list(places(doc))), label="where")
    value = data.draw(HOSTILE, label="value")
    path = tmp_path_factory.mktemp("data") / name
    path.write_text(yaml.safe_dump(mutated(doc, at, value), sort_keys=False), encoding="utf-8")
    try:
        LOADERS[name](path)
    except ConfigError as exc:
        said = exc.message
        assert "\n" not in said and said.startswith(f"{path}"), said
        assert exc.exit_code == 2
        if value is not DELETE and len(at) > 0:  # the value is in the file: its line is named
            assert re.match(rf"{re.escape(str(path))}:\d+: ", said), said
