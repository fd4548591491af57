"""TheRock tarball-name grammar: every real name from therock.md §3, twins, variants, ordering."""

from __future__ import annotations

import datetime

import pytest

from rockbuild.rocm.names import (
    VersionKind,
    parse_rocm_version,
    parse_tarball_name,
    tarball_filename,
)

D = datetime.date

# (file name, platform, group, tests, version, kind, date, base) for every real name listed in therock.md §3.
REAL_NAMES = [
    ("therock-dist-linux-gfx1151-6.5.0rc20250610.tar.gz", "linux", "gfx1151", False, "6.5.0rc20250610",
     VersionKind.NIGHTLY_RC, D(2025, 6, 10), (6, 5, 0)),
    ("therock-dist-windows-gfx1151-7.0.0rc20250711.tar.gz", "windows", "gfx1151", False, "7.0.0rc20250711",
     VersionKind.NIGHTLY_RC, D(2025, 7, 11), (7, 0, 0)),
    ("therock-dist-windows-gfx110X-dgpu-6.5.0.dev0+8fa909d3ab28e3c728d79334f6339a6ab933f787.tar.gz", "windows",
     "gfx110X-dgpu", False, "6.5.0.dev0+8fa909d3ab28e3c728d79334f6339a6ab933f787", VersionKind.DEV, None, (6, 5, 0)),
    ("therock-dist-windows-gfx120X-all-7.9.0rc20251008.tar.gz", "windows", "gfx120X-all", False, "7.9.0rc20251008",
     VersionKind.NIGHTLY_RC, D(2025, 10, 8), (7, 9, 0)),
    ("therock-dist-linux-gfx101X-dgpu-7.10.0a20251022.tar.gz", "linux", "gfx101X-dgpu", False, "7.10.0a20251022",
     VersionKind.NIGHTLY, D(2025, 10, 22), (7, 10, 0)),
    ("therock-dist-linux-gfx90X-dcgpu-7.10.0a20251106.tar.gz", "linux", "gfx90X-dcgpu", False, "7.10.0a20251106",
     VersionKind.NIGHTLY, D(2025, 11, 6), (7, 10, 0)),
    ("therock-dist-linux-gfx94X-dcgpu-7.10.0.tar.gz", "linux", "gfx94X-dcgpu", False, "7.10.0",
     VersionKind.STABLE, None, (7, 10, 0)),
    ("therock-dist-windows-gfx1151-7.11.0a20251205.tar.gz", "windows", "gfx1151", False, "7.11.0a20251205",
     VersionKind.NIGHTLY, D(2025, 12, 5), (7, 11, 0)),
    ("therock-dist-linux-gfx120X-all-7.11.0.tar.gz", "linux", "gfx120X-all", False, "7.11.0",
     VersionKind.STABLE, None, (7, 11, 0)),
    ("therock-dist-linux-gfx1151-7.14.0a20260612.tar.gz", "linux", "gfx1151", False, "7.14.0a20260612",
     VersionKind.NIGHTLY, D(2026, 6, 12), (7, 14, 0)),
    ("therock-dist-windows-gfx1153-7.14.0rc2.tar.gz", "windows", "gfx1153", False, "7.14.0rc2",
     VersionKind.PRERELEASE, None, (7, 14, 0)),
    ("therock-dist-linux-gfx1151-7.14.1.tar.gz", "linux", "gfx1151", False, "7.14.1", VersionKind.STABLE, None,
     (7, 14, 1)),
    ("therock-dist-linux-multiarch-7.13.0a20260430.tar.gz", "linux", "multiarch", False, "7.13.0a20260430",
     VersionKind.NIGHTLY, D(2026, 4, 30), (7, 13, 0)),
    ("therock-dist-linux-multiarch-10.1.0a20260807.tar.gz", "linux", "multiarch", False, "10.1.0a20260807",
     VersionKind.NIGHTLY, D(2026, 8, 7), (10, 1, 0)),
    ("therock-dist-windows-gfx120X-all-10.0.0.tar.gz", "windows", "gfx120X-all", False, "10.0.0",
     VersionKind.STABLE, None, (10, 0, 0)),
    ("therock-dist-linux-gfx110X-all-10.1.0a20260827.tar.gz", "linux", "gfx110X-all", False, "10.1.0a20260827",
     VersionKind.NIGHTLY, D(2026, 8, 27), (10, 1, 0)),
    ("therock-dist-windows-gfx1151-10.2.0a20260915.tar.gz", "windows", "gfx1151", False, "10.2.0a20260915",
     VersionKind.NIGHTLY, D(2026, 9, 15), (10, 2, 0)),
    ("therock-dist-linux-gfx110X-all-tests-10.1.0a20260823.tar.gz", "linux", "gfx110X-all", True, "10.1.0a20260823",
     VersionKind.NIGHTLY, D(2026, 8, 23), (10, 1, 0)),
    ("therock-dist-linux-multiarch-tests-10.1.0a20260823.tar.gz", "linux", "multiarch", True, "10.1.0a20260823",
     VersionKind.NIGHTLY, D(2026, 8, 23), (10, 1, 0)),
    ("therock-dist-linux-gfx1151-10.1.0a20260811+bkc.20260814.tar.gz", "linux", "gfx1151", False,
     "10.1.0a20260811+bkc.20260814", VersionKind.BKC, D(2026, 8, 14), (10, 1, 0)),
]  # fmt: skip


@pytest.mark.parametrize(("filename", "platform", "group", "tests", "version", "kind", "date", "base"), REAL_NAMES)
def test_real_names_parse_exactly(filename, platform, group, tests, version, kind, date, base):
    name = parse_tarball_name(filename)
    assert name is not None
    assert (name.platform, name.group, name.tests, name.version.text) == (platform, group, tests, version)
    assert (name.kind, name.date, name.base_version) == (kind, date, base)
    assert name.variant is None
    assert name.is_release is not tests
    # The parse is lossless: composing the name again gives the file name back.
    assert tarball_filename(platform, group, version, tests=tests) == filename


def test_adhoc_build_is_a_variant_not_a_group():
    name = parse_tarball_name("therock-dist-linux-gfx1151-ADHOCBUILD-7.0.0rc20250625.tar.gz")
    assert name is not None
    assert (name.group, name.variant, name.is_release) == ("gfx1151", "ADHOCBUILD", False)
    assert name.date == D(2025, 6, 25)


def test_group_with_hyphens_and_tests_twin_is_never_split_wrongly():
    twin = parse_tarball_name("therock-dist-linux-gfx94X-dcgpu-tests-7.15.0a20260701.tar.gz")
    assert twin is not None and (twin.group, twin.tests) == ("gfx94X-dcgpu", True)
    # A future lower-case group suffix stays part of the group (matched exactly by listings), not a variant.
    future = parse_tarball_name("therock-dist-linux-gfx115X-igpu-10.3.0a20261001.tar.gz")
    assert future is not None and (future.group, future.variant) == ("gfx115X-igpu", None)


def test_bkc_keeps_both_dates():
    version = parse_rocm_version("10.1.0a20260811+bkc.20260814")
    assert version is not None
    assert (version.kind, version.date, version.base_date) == (VersionKind.BKC, D(2026, 8, 14), D(2026, 8, 11))


def test_dev_version_keeps_sha():
    version = parse_rocm_version("6.4.0.dev0+8f6cdfc0d95845f4ca5a46de59d58894972a29a9")
    assert version is not None and version.sha == "8f6cdfc0d95845f4ca5a46de59d58894972a29a9"


@pytest.mark.parametrize(
    "filename",
    [
        "therock-dist-linux-gfx1151-7.0.0.tar.xz",  # not a tarball TheRock publishes
        "therock-dist-macos-gfx1151-7.0.0.tar.gz",  # unknown platform
        "therock-dist-linux-gfx1151.tar.gz",  # no version
        "therock-dist-linux-gfx1151-7.0.tar.gz",  # two-part version
        "therock-dist-linux-gfx1151-7.14.0a2026061.tar.gz",  # 7-digit date
        "therock-dist-linux-gfx1151-7.14.0a20261399.tar.gz",  # impossible date
        "therock-dist-linux-gfx1151-7.14.0b20260612.tar.gz",  # unknown pre-release letter
        "xtherock-dist-linux-gfx1151-7.14.0a20260612.tar.gz",  # not anchored at the start
        "therock-dist-linux-gfx1151-7.14.0a20260612.tar.gz.sha256",  # not anchored at the end
        "therock-dist-linux--7.14.0a20260612.tar.gz",  # empty group
    ],
)
def test_non_names_are_rejected(filename):
    assert parse_tarball_name(filename) is None


def _newest_first(*names_and_mtimes):
    parsed = [(parse_tarball_name(n), m) for n, m in names_and_mtimes]
    return [n.filename for n, m in sorted(parsed, key=lambda p: p[0].sort_key(p[1]), reverse=True)]


def test_date_beats_version_string_and_number():
    # As strings "10.2.0a…" < "7.9.0rc…"; the date (and the version tuple) put 10.2 first.
    order = _newest_first(
        ("therock-dist-linux-gfx1151-7.9.0rc20251008.tar.gz", None),
        ("therock-dist-linux-gfx1151-10.2.0a20260911.tar.gz", None),
        ("therock-dist-linux-gfx1151-7.15.0a20260719.tar.gz", None),
        ("therock-dist-linux-gfx1151-10.1.0a20260910.tar.gz", None),
    )
    assert order == [
        "therock-dist-linux-gfx1151-10.2.0a20260911.tar.gz",
        "therock-dist-linux-gfx1151-10.1.0a20260910.tar.gz",
        "therock-dist-linux-gfx1151-7.15.0a20260719.tar.gz",
        "therock-dist-linux-gfx1151-7.9.0rc20251008.tar.gz",
    ]


def test_same_date_is_ordered_by_mtime_then_version():
    # Two builds on one date (a version bump on the day): the later upload wins, whatever the version.
    assert (
        _newest_first(
            ("therock-dist-linux-gfx1151-10.2.0a20260911.tar.gz", 100.0),
            ("therock-dist-linux-gfx1151-10.1.0a20260911.tar.gz", 200.0),
        )[0]
        == "therock-dist-linux-gfx1151-10.1.0a20260911.tar.gz"
    )
    # Without upload times the version decides.
    assert (
        _newest_first(
            ("therock-dist-linux-gfx1151-10.1.0a20260911.tar.gz", None),
            ("therock-dist-linux-gfx1151-10.2.0a20260911.tar.gz", None),
        )[0]
        == "therock-dist-linux-gfx1151-10.2.0a20260911.tar.gz"
    )


def test_undated_versions_order_by_version_before_mtime():
    # A 7.14.1 patch uploaded after 10.0.0 is not the newer ROCm; rc2 < final; rc10 > rc9 (numerically).
    assert _newest_first(
        ("therock-dist-linux-gfx1151-7.14.1.tar.gz", 300.0),
        ("therock-dist-linux-gfx1151-10.0.0.tar.gz", 100.0),
        ("therock-dist-linux-gfx1151-10.0.0rc2.tar.gz", 50.0),
    ) == [
        "therock-dist-linux-gfx1151-10.0.0.tar.gz",
        "therock-dist-linux-gfx1151-10.0.0rc2.tar.gz",
        "therock-dist-linux-gfx1151-7.14.1.tar.gz",
    ]
    assert (
        _newest_first(
            ("therock-dist-linux-gfx1151-7.14.0rc9.tar.gz", None),
            ("therock-dist-linux-gfx1151-7.14.0rc10.tar.gz", None),
        )[0]
        == "therock-dist-linux-gfx1151-7.14.0rc10.tar.gz"
    )


def test_bkc_is_dated_by_its_bkc_date():
    order = _newest_first(
        ("therock-dist-linux-gfx1151-10.1.0a20260813.tar.gz", 999.0),
        ("therock-dist-linux-gfx1151-10.1.0a20260811+bkc.20260814.tar.gz", 1.0),
    )
    assert order[0] == "therock-dist-linux-gfx1151-10.1.0a20260811+bkc.20260814.tar.gz"


def test_to_dict_is_json_ready():
    import json

    name = parse_tarball_name("therock-dist-linux-gfx1151-10.1.0a20260811+bkc.20260814.tar.gz")
    assert name is not None
    data = json.loads(json.dumps(name.to_dict()))
    assert data["kind"] == "bkc" and data["date"] == "2026-08-14" and data["base_version"] == "10.1.0"
