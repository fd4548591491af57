"""Every parser of outside input, fed what hypothesis makes (issue 28): no input ends in an unexpected exception
(the CLI's exit 70, "internal error"), each refusal is the error of its own kind (a ConfigError for a data file, a
RecordError for a record, ...) in one line naming the file. docs/errors.md lists the inputs and what a bad one does.

Each test tries ``ROCKBUILD_HYPOTHESIS_EXAMPLES`` generated inputs (default 150; derandomized, so CI is repeatable)."""

from __future__ import annotations

import json
import os
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rockbuild.bundle.elf import read_elf
from rockbuild.bundle.pe import read_pe
from rockbuild.bundle.policy import parse_policy
from rockbuild.core.data import load_yaml
from rockbuild.core.errors import BundleError, ConfigError, ModelError, RecordError, RockbuildError
from rockbuild.core.jobs import load_families, parse_families
from rockbuild.core.programs import parse_programs
from rockbuild.core.records import RECORDS, ManifestRecord
from rockbuild.gpu import gpus_in_topology
from rockbuild.install import parse_sha256sums
from rockbuild.matrix import expand_matrix
from rockbuild.publish.config import parse_publish_config
from rockbuild.publish.image import parse_images_config
from rockbuild.rocm.channels import parse_channels
from rockbuild.rocm.index import parse_index_page, parse_s3_listing
from rockbuild.smoke.baselines import parse_baselines
from rockbuild.smoke.config import parse_smoke_config
from rockbuild.smoke.models import check_gguf

EXAMPLES = int(os.environ.get("ROCKBUILD_HYPOTHESIS_EXAMPLES", "150"))
PROFILE = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=6),
    max_leaves=25,
)
# objects shaped like the records, with the right keys and wrong or right values: the paths a reader really takes
KEYS = st.sampled_from(
    [
        "schema",
        "jobs",
        "id",
        "status",
        "stages",
        "llama_cpp",
        "commit",
        "rocm",
        "tarball",
        "ok",
        "runs",
        "bench",
        "tokens_per_second",
        "test",
        "newest",
        "last_good",
        "name",
        "targets",
        "assets",
        "sha256",
        "job",
        "error",
        "gpu",
        "fallback",
        "required",
        "version",
        "key",
    ]
)
SHAPED = st.recursive(
    JSON, lambda inner: st.dictionaries(KEYS, inner, max_size=8) | st.lists(inner, max_size=4), max_leaves=30
)
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=300)


def one_line(exc: RockbuildError, name: str) -> None:
    assert "\n" not in exc.message and name in exc.message, exc.message


@pytest.mark.parametrize("file", sorted(RECORDS))
@PROFILE
@given(data=SHAPED)
def test_a_record_reads_any_json_or_refuses_it_in_one_line(file, data):
    record = RECORDS[file]
    try:
        read = record.from_dict(data, f"out/job/{file}")
    except RecordError as exc:
        one_line(exc, f"out/job/{file}")
        assert exc.exit_code == 13
        return
    assert record.from_dict(read.to_dict(), file) == read  # what it accepted, it writes back as it read it


@pytest.mark.parametrize("file", sorted(RECORDS))
@PROFILE
@given(text=TEXT | st.builds(json.dumps, SHAPED).map(lambda s: s[: len(s) // 2]))
def test_a_record_file_of_any_text_is_read_or_refused_in_one_line(file, text):
    try:
        RECORDS[file].loads(text, f"{file} of release b1")
    except RecordError as exc:
        one_line(exc, f"{file} of release b1")


@PROFILE
@given(data=SHAPED)
def test_a_manifest_that_reads_gives_what_the_night_and_perf_ask(data):
    from rockbuild.perf import series_from_manifests
    from rockbuild.pipeline.inputs import last_good_tarballs, smoke_passed

    try:
        manifest = ManifestRecord.from_dict(data, "manifest.json")
    except RecordError:
        return
    list(smoke_passed(manifest))
    last_good_tarballs([("b1", manifest)])
    series_from_manifests([("b1", manifest)])


@PROFILE
@given(
    text=TEXT
    | st.lists(
        st.tuples(
            st.text(string.hexdigits, min_size=60, max_size=66),
            st.sampled_from([" ", "  ", " *", "\t"]),
            st.text(max_size=30),
        ),
        max_size=5,
    ).map(lambda rows: "\n".join(f"{h}{sep}{n}" for h, sep, n in rows))
)
def test_sha256sums_of_any_text(text):
    sums = parse_sha256sums(text)
    assert all(len(v) == 64 and set(v) <= set(string.hexdigits.lower()) for v in sums.values())


@PROFILE
@given(
    text=TEXT
    | st.builds(
        lambda files: f"<script>const files = {files};</script>",
        st.builds(json.dumps, JSON).map(lambda s: s[: max(1, len(s) - 1)])
        | st.builds(
            json.dumps, st.lists(st.dictionaries(st.sampled_from(["name", "size", "mtime"]), JSON), max_size=3)
        ),
    )
)
def test_an_index_page_of_any_text(text):
    try:
        entries = parse_index_page(text, "https://example.org/v2/gfx1151/")
    except RockbuildError as exc:
        one_line(exc, "")
        return
    assert all(e.url.startswith("https://example.org/") for e in entries)


@PROFILE
@given(
    text=TEXT
    | st.builds(
        lambda keys: (
            "<ListBucketResult>" + "".join(f"<Contents><Key>{k}</Key></Contents>" for k in keys) + "</ListBucketResult>"
        ),
        st.lists(TEXT, max_size=3),
    )
)
def test_an_s3_listing_of_any_text(text):
    try:
        parse_s3_listing(text, "https://bucket.example/?prefix=therock-dist-linux-")
    except RockbuildError as exc:
        one_line(exc, "")


YAML_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(string.ascii_letters + "-_.:/ ", max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(string.ascii_letters + "_", min_size=1, max_size=10), inner, max_size=4)
    ),
    max_leaves=15,
)
PARSERS = {
    "families.yaml": parse_families,
    "bundle-policy.yaml": parse_policy,
    "smoke.yaml": parse_smoke_config,
    "publish.yaml": parse_publish_config,
    "rocm-channels.yaml": parse_channels,
    "nightly.yaml": lambda doc, path: expand_matrix(doc, path, load_families()),
    "programs.yaml": parse_programs,
    "baselines.yaml": parse_baselines,
    "images.yaml": parse_images_config,
}


@pytest.mark.parametrize("name", sorted(PARSERS))
@PROFILE
@given(value=YAML_VALUES, text=TEXT)
def test_a_data_file_of_any_yaml_is_parsed_or_refused_naming_the_file(tmp_path_factory, name, value, text):
    import yaml

    path = tmp_path_factory.mktemp("yaml") / name
    for body in (yaml.safe_dump(value), text):
        path.write_text(body, encoding="utf-8")
        try:
            PARSERS[name](load_yaml(path), path)
        except ConfigError as exc:
            one_line(exc, str(path))


@PROFILE
@given(data=st.binary(max_size=200), prefix=st.sampled_from([b"", b"GGUF", b"GGUF\x03\x00\x00\x00"]))
def test_a_gguf_header_of_any_bytes(tmp_path_factory, data, prefix):
    path = tmp_path_factory.mktemp("gguf") / "model.gguf"
    path.write_bytes(prefix + data)
    try:
        check_gguf(path)
    except ModelError as exc:
        one_line(exc, "model.gguf")


@PROFILE
@given(
    data=st.binary(max_size=300),
    prefix=st.sampled_from([b"", b"\x7fELF\x02\x01\x01", b"MZ", b"MZ" + b"\0" * 58 + b"\x40\0\0\0PE\0\0"]),
)
def test_elf_and_pe_headers_of_any_bytes(tmp_path_factory, data, prefix):
    folder = tmp_path_factory.mktemp("bin")
    for name, read in (("libx.so", read_elf), ("x.dll", read_pe)):
        path = folder / name
        path.write_bytes(prefix + data)
        try:
            read(path)
        except BundleError as exc:
            one_line(exc, name)


@PROFILE
@given(
    nodes=st.lists(
        st.lists(
            st.tuples(
                st.sampled_from(
                    [
                        "gfx_target_version",
                        "simd_count",
                        "cpu_cores_count",
                        "simd_per_cu",
                        "drm_render_minor",
                        "device_id",
                        "junk",
                    ]
                ),
                st.integers(-5, 2**40).map(str) | TEXT,
            ),
            max_size=6,
        ),
        max_size=4,
    )
)
def test_a_kfd_topology_of_any_properties(tmp_path_factory, nodes):
    root = tmp_path_factory.mktemp("kfd")
    for i, props in enumerate(nodes):
        (root / str(i)).mkdir()
        (root / str(i) / "properties").write_text("\n".join(f"{k} {v}" for k, v in props), encoding="utf-8")
    for gpu in gpus_in_topology(Path(root)):
        assert gpu.target.startswith("gfx") and gpu.simd_count > 0
