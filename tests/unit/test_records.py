"""The records of rockbuild's files (rockbuild.core.records) and their JSON Schemas (docs/schemas/).

Like pypa/auditwheel's tests, what rockbuild's own writers produce is validated against the schema; every schema is
itself valid draft 2020-12; each schema is the one its record's types give (so the two agree on required keys and
types); and from_dict rejects malformed input with a one-line RecordError naming the file and the key.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, get_args, get_origin

import jsonschema
import pytest
from support.paths import REPO
from support.publishing import make_job, smoke_ok

from rockbuild.core.errors import NotFoundError, RecordError
from rockbuild.core.jobs import Job
from rockbuild.core.record import PAIRS, Record, form_of, key_of, written
from rockbuild.core.records import (
    RECORDS,
    BuildErrorInfo,
    BuildRecord,
    BundleRecord,
    FallbackRecord,
    HeldBack,
    InputsJob,
    InputsLlama,
    InputsRecord,
    InputsRocm,
    JobLastGood,
    KpackRef,
    LlamaCpp,
    ManifestRecord,
    SmokeRecord,
    StagesRecord,
    TarballRef,
    TriageRecord,
    TriageTrial,
)
from rockbuild.jobfolder import JobFolder

SCHEMAS = REPO / "docs" / "schemas"
FILES = {
    "build.json": BuildRecord,
    "bundle.json": BundleRecord,
    "smoke.json": SmokeRecord,
    "stages.json": StagesRecord,
    "fallback.json": FallbackRecord,
    "triage.json": TriageRecord,
    "held-back.json": HeldBack,
    "inputs.json": InputsRecord,
    "manifest.json": ManifestRecord,
}
JOB = Job(
    id="linux-gfx1151",
    os="linux",
    name="gfx1151",
    family="gfx1151",
    group="gfx1151",
    legacy_groups=(),
    targets=("gfx1151",),
    required=True,
    llama_ref="master",
    rocm_channel="nightly",
    rocm_version="latest",
    cmake=(),
    runner="ubuntu-22.04",
)


# -- the schema a record's types give ---------------------------------------------------------------------------------


def _type_schema(tp: Any, defs: dict[str, Any]) -> dict[str, Any]:
    origin = get_origin(tp)
    if tp is Any:
        return {}
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [_type_schema(a, defs) for a in get_args(tp)]}
    if origin is typing.Literal:
        return {"enum": list(get_args(tp))}
    if origin is tuple:
        return {"type": "array", "items": _type_schema(get_args(tp)[0], defs)}
    if origin in (dict, Mapping) or tp in (dict, Mapping):
        args = get_args(tp)
        return {"type": "object", "additionalProperties": _type_schema(args[1], defs) if args else {}}
    if isinstance(tp, type) and issubclass(tp, Record):
        if tp.__name__ not in defs:
            defs[tp.__name__] = {}
            defs[tp.__name__] = _object_schema(tp, defs)
        return {"$ref": f"#/$defs/{tp.__name__}"}
    return {
        "type": {str: "string", Path: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}[
            tp
        ]
    }


def _object_schema(cls: type[Record], defs: dict[str, Any]) -> dict[str, Any]:
    import dataclasses

    hints = typing.get_type_hints(cls)
    fields = cls._fields()
    required = [
        key_of(f) for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    out: dict[str, Any] = {
        "type": "object",
        "properties": {
            key_of(f): _type_schema(form.json_type if (form := form_of(f)) is not None else hints[f.name], defs)
            for f in fields
        },
    }
    if required:
        out["required"] = required
    return out


def schema_of(name: str, cls: type[Record]) -> dict[str, Any]:
    defs: dict[str, Any] = {}
    body = _object_schema(cls, defs)
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://github.com/rockbuild/rockbuild/docs/schemas/{name.removesuffix('.json')}.schema.json",
        "title": name,
        "description": (cls.__doc__ or "").strip().splitlines()[0],
        **body,
    }
    if defs:
        schema["$defs"] = dict(sorted(defs.items()))
    return schema


def schema_path(name: str) -> Path:
    return SCHEMAS / f"{name.removesuffix('.json')}.schema.json"


def load_schema(name: str) -> dict[str, Any]:
    return json.loads(schema_path(name).read_text(encoding="utf-8"))


def valid(name: str, data: Any) -> bool:
    return jsonschema.Draft202012Validator(load_schema(name)).is_valid(data)


def write_schemas() -> None:
    """Write docs/schemas/ from the records: ``python -c 'import test_records; test_records.write_schemas()'``."""
    SCHEMAS.mkdir(parents=True, exist_ok=True)
    for name, cls in FILES.items():
        schema_path(name).write_text(json.dumps(schema_of(name, cls), indent=2) + "\n", encoding="utf-8")


# -- (2) every schema is valid, (4) and is the one its record gives ---------------------------------------------------


@pytest.mark.parametrize("name", sorted(FILES))
def test_each_schema_is_valid_and_is_its_records(name):
    schema = load_schema(name)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema == schema_of(name, FILES[name]), f"{schema_path(name)} is stale: run write_schemas()"
    assert RECORDS[name] is FILES[name] and RECORDS["gpu-smoke.json"] is SmokeRecord


# -- (1) what rockbuild's writers produce passes its schema, and reads back as the same record ------------------------


def _check(name: str, path: Path) -> Record:
    data = json.loads(path.read_text(encoding="utf-8"))
    errors = [e.message for e in jsonschema.Draft202012Validator(load_schema(name)).iter_errors(data)]
    assert not errors, f"{path}: {errors[:3]}"
    record = FILES[name].from_dict(data, path)
    assert FILES[name].from_dict(record.to_dict()) == record  # round trip
    assert json.dumps(record.to_dict(), indent=2) + "\n" == path.read_text(encoding="utf-8")  # same bytes back
    return record


def test_the_writers_files_pass_their_schemas(tmp_path):
    from rockbuild.pipeline.inputs import inputs_record, read_inputs
    from rockbuild.pipeline.stages import StageLog
    from rockbuild.publish.jobs import load_job
    from rockbuild.publish.manifest import AssetFile, ReleaseContent, build_manifest, write_json

    folder = JobFolder.of(tmp_path / "out", JOB.id)
    folder.record_failure(
        JOB,
        "rocm",
        BuildErrorInfo.of(NotFoundError("no tarball for gfx1151")),
        LlamaCpp(commit="c0ffee", build_number="b1"),
    )
    build = _check("build.json", folder.build_json)
    assert isinstance(build, BuildRecord) and build.error is not None and build.error.exit_code == 4

    state = StageLog(folder)
    state.record("fetch", "k1", "ok", 1.5, root="/r", tarball={"name": "t.tar.gz", "sha256": "ab" * 32})
    state.record("build", "k2", "failed", 2.0, message="boom")
    night = _check("stages.json", folder.stages_json)
    assert isinstance(night, StagesRecord) and night.stages["build"].result == "failed"

    fallback = FallbackRecord(
        schema=1,
        newest=TarballRef(name="n.tar.gz", version="7.2.0a1", date="2026-12-01"),
        failed_stage="smoke",
        reason="cli failed",
        log_tail=("x",),
        attempt_dir="/a",
        last_good=TarballRef(name="g.tar.gz", version="7.2.0a0", release="b1"),
    )
    fallback.write(folder.fallback_json)
    _check("fallback.json", folder.fallback_json)

    from rockbuild.nightly.triage import Failure, bisect_commits
    from rockbuild.pipeline.stages import StagesOutcome

    trial = TriageTrial(
        llama_commit="a" * 40,
        rocm="n.tar.gz",
        verdict="good",
        seconds=1.5,
        ccache={"hits": 3, "misses": 1, "hit_rate": 0.75},
    )
    bisect = bisect_commits(
        [("b" * 40, "ggml : x (#12)"), ("c" * 40, "y")],
        "a" * 40,
        lambda commit, subject: dataclasses.replace(trial, llama_commit=commit, verdict="bad", subject=subject),
        steps=4,
        minutes=60,
        tails={"b" * 40: ("error: x",)},
    )
    failed = StagesOutcome(JOB.id, True, "failed", {"build": "failed"}, "build", "compile failed", 3.0)
    failure = Failure(
        JOB,
        failed,
        InputsLlama(ref="master", commit="c" * 40, url="https://github.com/x/llama.cpp"),
        None,
        JobLastGood(release="b1", llama_commit="a" * 40, rocm="n.tar.gz"),
        ("x",),
    )
    failure.record("llama.cpp", "only llama.cpp changed", ship="missing", trials=(trial,), bisect=bisect).write(
        folder.triage_json
    )
    triage = _check("triage.json", folder.triage_json)
    assert isinstance(triage, TriageRecord) and triage.bisect is not None
    assert triage.bisect.first_bad is not None and triage.bisect.first_bad.pr == 12 and triage.bisect.complete

    from rockbuild.nightly.triage import held_back_of

    held = held_back_of([dataclasses.replace(triage, ship="newest-good")], failure.llama, oldest=lambda c: c[0])
    assert held is not None
    held.write(tmp_path / "held-back.json")
    assert _check("held-back.json", tmp_path / "held-back.json") == held

    stale = InputsRocm(
        key="linux-gfx1151-nightly-latest",
        os="linux",
        groups=("gfx1151",),
        channel="nightly",
        requested="latest",
        error="the newest gfx1151 tarball is 9 days old",
        error_kind="stale",
        last_good={"name": "g.tar.gz", "url": "https://example.invalid/g.tar.gz", "release": "b0"},
    )
    vulkan = JOB.narrow(Job)
    vulkan = dataclasses.replace(vulkan, id="linux-vulkan", backend="vulkan", family="", group="", targets=())
    inputs = inputs_record(
        InputsLlama(ref="master", commit="c0ffee", build_number="b1", url="https://example.invalid/llama.cpp"),
        {stale.key: stale},
        (InputsJob.of(JOB, stale.key), InputsJob.of(vulkan, None)),
        resolved_at="2026-12-01T00:00:00+00:00",
        max_age_days=3,
        index_url=None,
    )
    inputs.write(tmp_path / "inputs.json")
    record = _check("inputs.json", tmp_path / "inputs.json")
    assert isinstance(record, InputsRecord) and record == inputs  # what resolve made is what every reader loads
    loaded = read_inputs(json.loads((tmp_path / "inputs.json").read_text()))
    assert loaded.job(JOB.id) == JOB and loaded.unresolved(JOB.id) == stale and loaded.rocm_for(vulkan.id) is None

    out = tmp_path / "pub"
    ok = load_job(make_job(out, "linux-gfx1151", smoke=smoke_ok()))
    failed = load_job(make_job(out, "linux-gfx1100", status="failed", failed_step="compile"))
    asset = AssetFile("a.zip", out / "a.zip", 3, "00" * 32, "zip", ok.id)
    manifest = build_manifest(
        ReleaseContent(tag="b1", fingerprint="f" * 16, jobs=[ok], failed=[failed], assets=[asset], repo="o/r"),
        floors={},
        floor_config={"linux": "2.35"},
    )
    write_json(tmp_path / "manifest.json", manifest)
    record = ManifestRecord.from_dict(manifest, "manifest.json")
    assert valid("manifest.json", manifest) and record.job("linux-gfx1151") is not None
    assert ManifestRecord.from_dict(record.to_dict()) == record and record.to_dict() == manifest

    for job_dir in (out / "linux-gfx1151",):  # publishkit's folders are shaped like the writers' files
        assert valid("build.json", json.loads((job_dir / "build.json").read_text()))
        assert valid("bundle.json", json.loads((job_dir / "bundle" / "bundle.json").read_text()))
        assert valid("smoke.json", json.loads((job_dir / "smoke.json").read_text()))


def test_an_inputs_file_is_refused_when_loaded_if_a_job_has_no_tarball_it_can_build_with(tmp_path):
    from rockbuild.core.errors import ConfigError
    from rockbuild.pipeline.inputs import load_inputs

    llama = {"ref": "master", "commit": "c0ffee", "build_number": 1000, "url": "u"}
    job = {**JOB.to_dict(), "rocm_key": None}
    path = tmp_path / "inputs.json"
    path.write_text(json.dumps({"schema": 1, "tool": "rockbuild", "llama_cpp": llama, "jobs": [job]}))
    # a ROCm job without a tarball: refused when the file is read (before: a ConfigError once that job got to fetch)
    with pytest.raises(ConfigError, match=rf"^{path} has no ROCm tarball for linux-gfx1151; write it again"):
        load_inputs(path)
    # a key none of its tarballs has (before: a KeyError, a bug's exit, when the job got to fetch)
    path.write_text(
        json.dumps(
            {
                "schema": 1,
                "tool": "rockbuild",
                "llama_cpp": llama,
                "jobs": [{**job, "rocm_key": "linux-gfx1151-nightly-latest"}],
            }
        )
    )
    with pytest.raises(ConfigError, match="linux-gfx1151's rocm_key 'linux-gfx1151-nightly-latest' is none of its"):
        load_inputs(path)
    # a build number written as a number by hand is read as its text (as build.json and the build key take it)
    rocm = {"key": "k", "os": "linux", "groups": ["gfx1151"], "channel": "nightly", "requested": "latest"}
    path.write_text(
        json.dumps(
            {
                "schema": 1,
                "tool": "rockbuild",
                "llama_cpp": llama,
                "rocm": {"k": rocm},
                "jobs": [{**job, "rocm_key": "k"}],
            }
        )
    )
    inputs = load_inputs(path)
    assert inputs.llama_cpp.build_number == "1000" and inputs.llama_cpp.pin() == {
        "commit": "c0ffee",
        "build_number": "1000",
    }
    assert inputs.rocm_for(JOB.id) == InputsRocm.from_dict(rocm)


# -- (3) malformed input is rejected, in one line naming the file and the key ------------------------------------------

BAD = [
    (
        "build.json",
        {"schema": 1, "status": "ok", "llama_cpp": {"commit": 3}},
        "llama_cpp.commit must be a string, not int",
    ),
    ("build.json", {"schema": 1}, "status is missing"),
    ("build.json", {"status": "failed", "error": "boom"}, "error must be an object, not string"),
    ("build.json", [1], "must be an object, not array"),
    ("bundle.json", {"audit": {"ok": "yes"}}, "audit.ok must be a boolean"),
    ("bundle.json", {"targets": "gfx1151"}, "targets must be an array, not string"),
    ("smoke.json", {"failures": []}, "ok is missing"),
    ("smoke.json", {"ok": True, "runs": {"cli": {"log_tail": [1]}}}, "runs.cli.log_tail[0] must be a string"),
    ("stages.json", {"schema": 1, "stages": {"fetch": "ok"}}, "stages.fetch must be an object, not string"),
    ("stages.json", {"stages": {"fetch": {"result": "ok"}}}, "stages.fetch.key is missing"),
    ("fallback.json", {"schema": 1}, "newest is missing"),
    ("fallback.json", {"newest": {"name": 1}}, "newest.name must be a string, not int"),
    ("triage.json", {"job": "j", "cause": "llama.cpp", "evidence": "e"}, "llama_commit is missing"),
    (
        "triage.json",
        {
            "job": "j",
            "cause": "llama.cpp",
            "evidence": "e",
            "llama_commit": "c",
            "bisect": {"good": "a", "bad": "c", "candidates": "5"},
        },
        "bisect.candidates must be an integer",
    ),
    # a closed set (a Literal field): one of its values, named in the message
    (
        "triage.json",
        {"job": "j", "cause": "ROCm", "evidence": "e", "llama_commit": "c"},
        "cause must be one of 'llama.cpp', 'rocm', 'machine', 'unknown', not 'ROCm'",
    ),
    (
        "triage.json",
        {"job": "j", "cause": "rocm", "evidence": "e", "llama_commit": "c", "ship": None},
        "ship must be one of 'missing', 'newest-good', 'blocked', 'fallback', not null",
    ),
    ("build.json", {"schema": 1, "status": "done"}, "status must be one of 'ok', 'failed', not 'done'"),
    ("inputs.json", {"schema": 1, "tool": "rockbuild"}, "llama_cpp is missing"),
    (
        "inputs.json",
        {
            "schema": 1,
            "tool": "rockbuild",
            "llama_cpp": {"ref": "m", "commit": "c", "url": "u"},
            "jobs": [{"os": "linux"}],
        },
        "jobs[0].id is missing",
    ),
    (
        "inputs.json",
        {
            "schema": 1,
            "tool": "rockbuild",
            "llama_cpp": {"ref": "m", "commit": "c", "url": "u"},
            "rocm": {
                "k": {"key": "k", "os": "linux", "groups": "gfx1151", "channel": "nightly", "requested": "latest"}
            },
        },
        "rocm.k.groups must be an array, not string",
    ),
    (
        "inputs.json",
        {
            "schema": 1,
            "tool": "rockbuild",
            "llama_cpp": {"ref": "m", "commit": "c", "url": "u"},
            "rocm": {"k": {"key": "k", "os": "linux", "groups": []}},
        },
        "rocm.k.channel is missing",
    ),
    ("manifest.json", {"schema": 1, "jobs": 3}, "jobs must be an array, not int"),
    (
        "manifest.json",
        {"schema": 1, "jobs": [{"id": "x", "gpu_smoke": {"bench": [{"tokens_per_second": "9"}]}}]},
        "jobs[0].gpu_smoke.bench[0].tokens_per_second must be a number",
    ),
    ("manifest.json", "<html>", "must be an object, not string"),
]


@pytest.mark.parametrize(("name", "data", "why"), BAD)
def test_from_dict_rejects_what_the_schema_rejects(name, data, why):
    source = f"out/linux-gfx1151/{name}"
    with pytest.raises(RecordError) as caught:
        FILES[name].from_dict(data, source)
    message = str(caught.value)
    assert message.startswith(f"{source}: ") and why in message and "\n" not in message, message
    assert caught.value.exit_code == 13
    assert not valid(name, data)  # the schema says no as well


def test_a_value_outside_a_closed_set_once_only_in_a_comment_is_refused_on_read():
    """A field whose values were listed only in a comment is a Literal now (issue 58, item 2): build.json's
    ``patches[].status`` and ``job.os`` refuse what rockbuild never writes, in one line naming the key and the values
    it may hold, and the schema refuses it too; the values rockbuild writes still read back."""
    source = "out/linux-gfx1151/build.json"
    good = {
        "schema": 1,
        "status": "ok",
        "job": {"id": "linux-gfx1151", "os": "linux"},
        "patches": {"digest": "d", "patches": [{"id": "amx-tile-config", "status": "not for this tree"}]},
    }
    assert BuildRecord.from_dict(good, source).patches.patches[0].status == "not for this tree"
    assert valid("build.json", good)
    skipped = {**good, "patches": {"digest": "d", "patches": [{"id": "amx-tile-config", "status": "skipped"}]}}
    with pytest.raises(RecordError) as caught:
        BuildRecord.from_dict(skipped, source)
    assert caught.value.message == (
        f"{source}: patches.patches[0].status must be one of '', 'applied', 'upstream', 'not for this tree', "
        "not 'skipped'"
    )
    assert not valid("build.json", skipped)
    macos = {**good, "job": {"id": "macos-gfx1151", "os": "macos"}}
    with pytest.raises(RecordError) as caught:
        BuildRecord.from_dict(macos, source)
    assert caught.value.message == f"{source}: job.os must be one of '', 'linux', 'windows', not 'macos'"
    assert not valid("build.json", macos)


@pytest.mark.parametrize("text", ['{"schema": 1, "jobs": [', "<!DOCTYPE html><html></html>", ""])
def test_a_truncated_or_html_manifest_is_a_record_error(text, tmp_path):
    path = tmp_path / "manifest.json"
    path.write_text(text)
    with pytest.raises(RecordError, match=rf"^{path}: not valid JSON"):
        ManifestRecord.read(path)
    assert ManifestRecord.read(tmp_path / "missing.json") is None


def test_older_files_and_unknown_keys_are_read():
    old = BuildRecord.from_dict({"status": "ok", "llama_cpp": {"commit": "c"}, "from_the_future": {"x": 1}})
    assert old.commit == "c" and old.schema is None and old.extra == {"from_the_future": {"x": 1}}
    assert old.to_dict() == {"status": "ok", "llama_cpp": {"commit": "c"}, "from_the_future": {"x": 1}}
    assert valid("build.json", old.to_dict())


# -- the engine (rockbuild.core.record): what a field can say about its JSON --------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Sample(Record):
    FILE: ClassVar[str] = "sample.json"

    where: Path
    names: tuple[str, ...] = ()
    joined: str = dataclasses.field(init=False, default="")  # derived: written, never read
    defines: tuple[tuple[str, str], ...] = dataclasses.field(default=(), metadata=PAIRS)

    def __post_init__(self) -> None:
        object.__setattr__(self, "joined", ";".join(self.names))


@dataclasses.dataclass(frozen=True, kw_only=True)
class _SampleWithKey(_Sample):
    key: str | None = None


def test_the_engine_writes_paths_derived_fields_and_json_forms_and_reads_them_back():
    sample = _Sample(where=Path("/out/job"), names=("a", "b"), defines=(("Z", "1"), ("A", "2")))
    data = sample.to_dict()
    assert data == {"where": "/out/job", "names": ["a", "b"], "joined": "a;b", "defines": {"Z": "1", "A": "2"}}
    assert list(data["defines"]) == ["Z", "A"]  # the pairs' order is the object's
    back = _Sample.from_dict(json.loads(json.dumps(data)))
    assert back == sample and isinstance(back.where, Path) and back.defines == (("Z", "1"), ("A", "2"))
    # a derived key in the file is not trusted: it is computed from what it derives from
    assert _Sample.from_dict({**data, "joined": "forged"}).joined == "a;b"
    assert _SampleWithKey.from_dict({**data, "key": "k"}).narrow(_Sample) == sample


@pytest.mark.parametrize(
    "data, message",
    [
        ({"where": 5}, "sample.json: where must be a path (a string), not int"),
        ({"where": "/x", "defines": ["Z", "1"]}, "sample.json: defines must be an object, not array"),
        ({"where": "/x", "defines": {"Z": 1}}, "sample.json: defines.Z must be a string, not int"),
    ],
)
def test_the_engine_rejects_a_wrong_path_or_json_form_in_one_line(data, message):
    with pytest.raises(RecordError) as caught:
        _Sample.from_dict(data)
    assert caught.value.message == message


def test_a_field_under_another_json_key_is_written_read_and_refused_by_that_key():
    """bundle.json's kpack_refs are {file, from, to}: ``from`` is a Python keyword, so the field has a key of its own."""
    ref = KpackRef(file="librocblas.so.5", before="../.kpack/blas_lib.kpm", after="./.kpack/blas_lib.kpm")
    data = ref.to_dict()
    assert data == {"file": "librocblas.so.5", "from": "../.kpack/blas_lib.kpm", "to": "./.kpack/blas_lib.kpm"}
    assert KpackRef.from_dict(data) == ref and KpackRef.from_dict(data).to_dict() == data
    assert KpackRef.keyed(data) == ref  # a record made from a JSON object's keys takes them by key too
    with pytest.raises(RecordError) as caught:
        BundleRecord.from_dict({"kpack_refs": [{"file": "x", "to": "y"}]})
    assert caught.value.message == "bundle.json: kpack_refs[0].from is missing"
    assert schema_of("bundle.json", BundleRecord)["$defs"]["KpackRef"]["required"] == ["file", "from", "to"]


def test_a_date_field_is_an_iso_day_in_json_and_a_wrong_one_is_one_line():
    """The channels' host dates (``from``: a key of its own too) and a family's ``source.since`` are days in Python and
    ISO strings (or null) in JSON, through one form."""
    import datetime

    from rockbuild.core.jobs import FamilySource
    from rockbuild.rocm.channels import IndexHost

    host = IndexHost("https://x/", since=datetime.date(2026, 4, 27))
    data = host.to_dict()
    assert data == {"url": "https://x/", "from": "2026-04-27", "until": None, "listing": "html", "key_prefix": ""}
    assert IndexHost.from_dict(data) == host
    assert FamilySource.from_dict({"ref": "TheRock#5744", "since": None}).since is None
    with pytest.raises(RecordError) as caught:
        IndexHost.from_dict({"url": "https://x/", "from": "2026-13-01"}, "channels.json")
    assert caught.value.message == "channels.json: from: '2026-13-01' is no date (YYYY-MM-DD)"
    with pytest.raises(RecordError) as caught:
        FamilySource.from_dict({"ref": "r", "since": 20260427}, "families.json")
    assert caught.value.message == "families.json: since must be a string, not int"


def test_an_inline_record_is_written_as_the_objects_own_keys_and_read_back_from_them():
    """``rocm list --json``'s entry: its tarball name's keys (the version as its text, its kind, date and base derived),
    then the entry's own; read back from the same object, a file's key order and unknown keys kept."""
    from rockbuild.rocm.index import TarballEntry
    from rockbuild.rocm.names import parse_tarball_name

    name = parse_tarball_name("therock-dist-linux-gfx1151-10.2.0a20260915.tar.gz")
    assert name is not None
    entry = TarballEntry(name=name, url="https://x/t.tar.gz", size=3)
    data = entry.to_dict()
    assert list(data) == [
        *("filename", "platform", "group", "tests", "variant", "version", "kind", "date", "base_version"),
        *("url", "mtime", "size", "index_url"),
    ]
    assert (data["version"], data["kind"], data["date"], data["base_version"]) == (
        "10.2.0a20260915",
        "nightly",
        "2026-09-15",
        "10.2.0",
    )
    back = TarballEntry.from_dict(json.loads(json.dumps(data)))
    assert back == entry and back.to_dict() == data
    shuffled = {"url": data["url"], "zzz": 1, **{k: v for k, v in data.items() if k != "url"}}
    assert list(TarballEntry.from_dict(shuffled).to_dict()) == list(shuffled)
    with pytest.raises(RecordError) as caught:
        TarballEntry.from_dict({k: v for k, v in data.items() if k != "platform"}, "list.json")
    assert caught.value.message == "list.json: platform is missing"
    with pytest.raises(RecordError) as caught:
        TarballEntry.from_dict({**data, "version": "10.2"}, "list.json")
    assert caught.value.message == "list.json: version: '10.2' is no TheRock version"


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Report(Record):
    FILE: ClassVar[str] = "report.json"

    sizes: tuple[tuple[str, int], ...] = dataclasses.field(
        default=(), metadata=written(lambda sizes: [{"name": n, "size": s} for n, s in sizes])
    )
    samples: tuple[Path, ...] = dataclasses.field(
        default=(), metadata=written(lambda paths: [_Sample(where=p) for p in paths])
    )


def test_a_reports_written_field_is_made_by_its_form_and_refused_on_read():
    """A command's report holds values that are no records (a release's files, its jobs): a form writes them (as JSON
    or as the records they are written as), and nothing reads a report back."""
    report = _Report(sizes=(("a", 1),), samples=(Path("/x"),))
    data = report.to_dict()
    assert data == {
        "sizes": [{"name": "a", "size": 1}],
        "samples": [{"where": "/x", "names": [], "joined": "", "defines": {}}],
    }
    with pytest.raises(RecordError) as caught:
        _Report.from_dict(data)
    assert caught.value.message == "report.json: sizes: is written by a report and never read back"
