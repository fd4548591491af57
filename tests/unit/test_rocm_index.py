"""The ROCm index client against a real local HTTP server (pytest-httpserver) that serves each host TheRock used.

Hosts, as paths on one local server (each given its own date range in a channels file written per test):
  /rocm/core/tarball/      the current nightly host: TheRock's ``const files`` index page (>= 2026-08-23)
  /tarball-multi-arch/     the frozen multi-arch host: ``const files`` page (2026-04-27 .. 2026-08-22)
  /bucket/                 the frozen per-family host as an S3 bucket: ListBucket XML v1/v2, 3 keys per page
  /dev/                    a plain ``<a href>`` directory listing (dev channel, ``+`` in names)
"""

from __future__ import annotations

import base64
import datetime
import json
import re
import textwrap
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

import pytest
from werkzeug import Request, Response

from rockbuild.core.errors import ConfigError, FetchError, NotFoundError, StaleInputError, UsageError
from rockbuild.downloader import get_text, make_session
from rockbuild.rocm.channels import load_channels
from rockbuild.rocm.index import IndexSource, list_tarballs, read_index, resolve_tarball

D = datetime.date


def _mtime(name: str, extra: float = 0.0) -> float:
    """A plausible upload time: 07:00 UTC on the version's date (or a fixed day), plus ``extra`` seconds."""
    m = re.search(r"(?:a|rc|bkc\.)(\d{8})\.tar\.gz$", name)
    day = datetime.datetime.strptime(m.group(1), "%Y%m%d") if m else datetime.datetime(2026, 1, 1)
    return day.replace(hour=7, tzinfo=datetime.UTC).timestamp() + extra


def _names(platforms_groups: dict[str, list[str]], versions: list[str], *, twins: bool = True) -> list[str]:
    out = []
    for version in versions:
        for platform, groups in platforms_groups.items():
            for group in groups:
                out.append(f"therock-dist-{platform}-{group}-{version}.tar.gz")
                if twins:
                    out.append(f"therock-dist-{platform}-{group}-tests-{version}.tar.gz")
    return out


# The current host: several nights, tests twins, multiarch, windows, a per-night gap (no linux gfx1151 on 09-11),
# a BKC build (literal '+'), an ad-hoc variant newer than everything, and junk entries.
CURRENT = sorted(
    _names(
        {"linux": ["gfx1151", "gfx110X-all", "gfx120X-all", "multiarch"], "windows": ["gfx1151", "gfx110X-all"]},
        ["10.1.0a20260823", "10.1.0a20260824", "10.1.0a20260910"],
    )
    + _names({"linux": ["gfx110X-all", "gfx120X-all", "multiarch"], "windows": ["gfx1151"]}, ["10.2.0a20260911"])
    + [
        "therock-dist-linux-gfx1151-10.1.0a20260811+bkc.20260814.tar.gz",
        "therock-dist-linux-gfx1151-ADHOCBUILD-10.2.0a20260912.tar.gz",
    ]
)
JUNK = [{"name": "README.tar.gz", "mtime": 1.0}, {"name": 42}, "not-an-object"]

MULTI_ARCH = sorted(
    _names(
        {"linux": ["gfx1151", "gfx110X-all", "gfx103X-all", "multiarch"], "windows": ["gfx1151"]},
        ["7.13.0a20260430", "7.14.0a20260610", "7.15.0a20260719", "10.1.0a20260807", "10.1.0a20260822"],
    )
)

# The frozen per-family bucket (no twins then): old rc-dated nightlies, the gfx110X-dgpu -> -all rename
# (last -dgpu 2025-11-20), gfx103X-dgpu, an ad-hoc build, and the last file 2026-06-12.
PER_FAMILY = sorted(
    [
        "therock-dist-linux-gfx1151-6.5.0rc20250610.tar.gz",
        "therock-dist-linux-gfx1151-ADHOCBUILD-7.0.0rc20250625.tar.gz",
        "therock-dist-linux-gfx1151-7.9.0rc20251008.tar.gz",
        "therock-dist-linux-gfx110X-dgpu-7.9.0rc20251008.tar.gz",
        "therock-dist-linux-gfx110X-dgpu-7.10.0a20251022.tar.gz",
        "therock-dist-linux-gfx110X-dgpu-7.11.0a20251120.tar.gz",
        "therock-dist-linux-gfx110X-all-7.11.0a20251121.tar.gz",
        "therock-dist-linux-gfx103X-dgpu-7.12.0a20260421.tar.gz",
        "therock-dist-linux-gfx1151-7.14.0a20260612.tar.gz",
        "therock-dist-linux-gfx110X-all-7.14.0a20260612.tar.gz",
        "therock-dist-windows-gfx1151-7.0.0rc20250711.tar.gz",
        "therock-dist-windows-gfx1151-7.14.0a20260612.tar.gz",
    ]
)


def const_files_page(names: list[str], extra: list = (), twin_later: bool = True) -> str:
    """TheRock's generated index page (build_tools/index_generation_s3_tar.py): one-line JSON in a script."""
    files = [
        # The -tests- twin is uploaded after the runtime tarball: newest-by-mtime must still not pick it.
        {"name": n, "mtime": _mtime(n, 600.0 if twin_later and "-tests-" in n else 0.0)}
        for n in names
    ]
    return textwrap.dedent(
        """\
        <html>
        <head>
            <title>Tarball index</title>
            <meta charset="utf-8"/>
            <script>
                const files = {files};
                function applyFilter(fileList, filter) {{
                    return fileList.filter(f => f.name.includes(filter));
                }}
            </script>
        </head>
        <body><table id="files"></table></body>
        </html>
        """
    ).format(files=json.dumps(files + list(extra)))


class FakeS3:
    """A ListObjects (v1) / ListObjectsV2 endpoint over a fixed key list, ``page_size`` keys per page."""

    def __init__(self, keys: list[str], page_size: int = 3) -> None:
        self.keys = sorted(keys)
        self.page_size = page_size
        self.queries: list[dict[str, str]] = []

    def __call__(self, request: Request) -> Response:
        q = {k: v[0] for k, v in parse_qs(request.query_string.decode(), keep_blank_values=True).items()}
        self.queries.append(q)
        prefix = q.get("prefix", "")
        keys = [k for k in self.keys if k.startswith(prefix)]
        v2 = q.get("list-type") == "2"
        if v2:
            # Our tokens are the last key plus two bytes that make the base64 carry '+', '/' or '='.
            after = base64.b64decode(q["continuation-token"])[:-2].decode() if "continuation-token" in q else ""
        else:
            after = q.get("marker", "")
        keys = [k for k in keys if k > after]
        page, rest = keys[: self.page_size], keys[self.page_size :]
        contents = "".join(
            f"<Contents><Key>{escape(k)}</Key>"
            f"<LastModified>{datetime.datetime.fromtimestamp(_mtime(k), datetime.UTC):%Y-%m-%dT%H:%M:%S.000Z}"
            f"</LastModified><ETag>&quot;x&quot;</ETag><Size>{1_700_000_000 + i}</Size>"
            f"<StorageClass>STANDARD</StorageClass></Contents>"
            for i, k in enumerate(page)
        )
        truncated = "true" if rest else "false"
        if v2:
            # Tokens are opaque; make this one need URL-encoding (S3's contain '+', '/', '=').
            token = base64.b64encode(page[-1].encode() + b"\xfb\xff").decode() if rest else ""
            head = f"<KeyCount>{len(page)}</KeyCount>" + (
                f"<NextContinuationToken>{token}</NextContinuationToken>" if rest else ""
            )
        else:
            head = f"<Marker>{escape(after)}</Marker>"
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>therock-nightly-tarball</Name>'
            f"<Prefix>{escape(prefix)}</Prefix>{head}<MaxKeys>{self.page_size}</MaxKeys>"
            f"<IsTruncated>{truncated}</IsTruncated>{contents}</ListBucketResult>"
        )
        return Response(body, content_type="application/xml")


@pytest.fixture
def hosts(httpserver):
    """Serve all hosts; returns a dict with their URLs and the FakeS3 bucket (for query assertions)."""
    httpserver.expect_request("/rocm/core/tarball/").respond_with_data(
        const_files_page(CURRENT, JUNK), content_type="text/html"
    )
    httpserver.expect_request("/tarball-multi-arch/").respond_with_data(
        const_files_page(MULTI_ARCH), content_type="text/html"
    )
    bucket = FakeS3(PER_FAMILY, page_size=3)
    httpserver.expect_request("/bucket/").respond_with_handler(bucket)
    return {
        "current": httpserver.url_for("/rocm/core/tarball/"),
        "multi": httpserver.url_for("/tarball-multi-arch/"),
        "bucket": httpserver.url_for("/bucket/"),
        "s3": bucket,
        "server": httpserver,
    }


@pytest.fixture
def channels_file(tmp_path, hosts):
    path = tmp_path / "channels.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            channels:
              nightly:
                hosts:
                  - url: {hosts["current"]}
                    from: 2026-08-23
                  - url: {hosts["multi"]}
                    from: 2026-04-27
                    until: 2026-08-22
                  - url: {hosts["bucket"]}
                    until: 2026-06-12
                    listing: s3
            """
        ),
        encoding="utf-8",
    )
    return path


def requested_paths(httpserver) -> list[str]:
    return [request.path for request, _response in httpserver.log]


# ------------------------------------------------------------------------------------------- index page parsing


def test_const_files_page_lists_newest_runtime_tarballs_only(hosts):
    entries = list_tarballs(platform="linux", groups=["gfx1151"], index_url=hosts["current"])
    names = [e.name.filename for e in entries]
    # 09-11 has no linux gfx1151 (per-night gap), the ADHOCBUILD (dated 09-12) and all -tests- twins are skipped.
    assert names == [
        "therock-dist-linux-gfx1151-10.1.0a20260910.tar.gz",
        "therock-dist-linux-gfx1151-10.1.0a20260824.tar.gz",
        "therock-dist-linux-gfx1151-10.1.0a20260823.tar.gz",
        "therock-dist-linux-gfx1151-10.1.0a20260811+bkc.20260814.tar.gz",
    ]
    newest = entries[0]
    assert newest.url == hosts["current"] + "therock-dist-linux-gfx1151-10.1.0a20260910.tar.gz"
    assert newest.mtime == _mtime(newest.name.filename)
    assert newest.index_url == hosts["current"]
    # '+' travels as %2B; the name keeps it.
    assert entries[-1].url == hosts["current"] + "therock-dist-linux-gfx1151-10.1.0a20260811%2Bbkc.20260814.tar.gz"


def test_latest_is_never_a_tests_twin_even_when_uploaded_later(hosts):
    entry = resolve_tarball(platform="linux", groups="gfx110X-all", source=IndexSource(index_url=hosts["current"]))
    assert entry.name.filename == "therock-dist-linux-gfx110X-all-10.2.0a20260911.tar.gz"
    assert not entry.name.tests


def test_latest_is_per_platform_and_group(hosts):
    win = resolve_tarball(platform="windows", groups="gfx1151", source=IndexSource(index_url=hosts["current"]))
    lin = resolve_tarball(platform="linux", groups="gfx1151", source=IndexSource(index_url=hosts["current"]))
    multi = resolve_tarball(platform="linux", groups="multiarch", source=IndexSource(index_url=hosts["current"]))
    assert win.name.version.text == "10.2.0a20260911"
    assert lin.name.version.text == "10.1.0a20260910"
    assert multi.name.filename == "therock-dist-linux-multiarch-10.2.0a20260911.tar.gz"


def test_plain_href_listing(httpserver):
    sha = "8fa909d3ab28e3c728d79334f6339a6ab933f787"
    page = f"""<html><body><h1>Index of /dev/</h1><pre>
    <a href="../">../</a>
    <a href="therock-dist-windows-gfx110X-dgpu-6.5.0.dev0%2B{sha}.tar.gz">therock-dist-windows-gfx110X-dgpu-6.5.0.dev0+{sha}.tar.gz</a>
    <a href="therock-dist-linux-gfx1151-6.5.0.dev0+{sha}.tar.gz">literal plus</a>
    <a href="https://cdn.example/x/therock-dist-linux-gfx1151-7.14.1.tar.gz">elsewhere</a>
    <a href="therock-dist-linux-gfx1151-tests-7.14.1.tar.gz">twin</a>
    <a href="notes.txt">notes.txt</a>
    </pre>Mirrored by hand: therock-dist-linux-gfx1151-7.14.0rc2.tar.gz</body></html>"""
    httpserver.expect_request("/dev/").respond_with_data(page, content_type="text/html")
    base = httpserver.url_for("/dev/")
    by_name = {e.name.filename: e for e in read_index(base, fetch_text=get_text)}
    assert set(by_name) == {
        f"therock-dist-windows-gfx110X-dgpu-6.5.0.dev0+{sha}.tar.gz",
        f"therock-dist-linux-gfx1151-6.5.0.dev0+{sha}.tar.gz",
        "therock-dist-linux-gfx1151-7.14.1.tar.gz",
        "therock-dist-linux-gfx1151-tests-7.14.1.tar.gz",
        "therock-dist-linux-gfx1151-7.14.0rc2.tar.gz",
    }
    assert by_name[f"therock-dist-linux-gfx1151-6.5.0.dev0+{sha}.tar.gz"].url == (
        f"{base}therock-dist-linux-gfx1151-6.5.0.dev0%2B{sha}.tar.gz"
    )
    assert by_name[f"therock-dist-windows-gfx110X-dgpu-6.5.0.dev0+{sha}.tar.gz"].url == (
        f"{base}therock-dist-windows-gfx110X-dgpu-6.5.0.dev0%2B{sha}.tar.gz"
    )
    assert by_name["therock-dist-linux-gfx1151-7.14.1.tar.gz"].url == (
        "https://cdn.example/x/therock-dist-linux-gfx1151-7.14.1.tar.gz"
    )
    assert (
        by_name["therock-dist-linux-gfx1151-7.14.0rc2.tar.gz"].url
        == f"{base}therock-dist-linux-gfx1151-7.14.0rc2.tar.gz"
    )
    assert all(e.mtime is None for e in by_name.values())
    # Undated stable beats rc and dev without any upload time.
    latest = resolve_tarball(platform="linux", groups="gfx1151", source=IndexSource(index_url=base))
    assert latest.name.filename == "therock-dist-linux-gfx1151-7.14.1.tar.gz"


def test_a_page_without_tarballs_is_an_error_not_an_empty_list(httpserver):
    httpserver.expect_request("/empty/").respond_with_data("<html><body>Welcome to nginx!</body></html>")
    with pytest.raises(FetchError, match="lists no therock-dist tarballs"):
        list_tarballs(platform="linux", groups="gfx1151", index_url=httpserver.url_for("/empty/"))


def test_malformed_const_files_is_a_fetch_error(httpserver):
    httpserver.expect_request("/bad/").respond_with_data('<script>const files = [{"name": "x",];</script>')
    with pytest.raises(FetchError, match="malformed file list"):
        list_tarballs(platform="linux", groups="gfx1151", index_url=httpserver.url_for("/bad/"))


# ---------------------------------------------------------------------------------------------------- S3 XML


def test_s3_v1_listing_follows_markers_across_pages(hosts):
    s3: FakeS3 = hosts["s3"]
    url = hosts["bucket"] + "?prefix=therock-dist-linux-"
    entries = read_index(url, fetch_text=get_text)
    linux = [n for n in PER_FAMILY if n.startswith("therock-dist-linux-")]
    assert sorted(e.name.filename for e in entries) == linux  # all 10 keys, over 4 pages of 3
    assert len(s3.queries) == 4
    assert [q.get("marker") for q in s3.queries] == [None, linux[2], linux[5], linux[8]]
    assert all(q["prefix"] == "therock-dist-linux-" for q in s3.queries)
    first = next(e for e in entries if e.name.filename == linux[0])
    assert first.mtime == _mtime(linux[0]) and first.size == 1_700_000_000
    assert first.url == hosts["bucket"] + linux[0]
    # A path-style bucket URL without the trailing slash: keys still land under the bucket.
    hosts["server"].expect_request("/bucket").respond_with_handler(s3)
    entries = read_index(hosts["bucket"].rstrip("/") + "?prefix=therock-dist-windows-", fetch_text=get_text)
    assert {e.url for e in entries} == {hosts["bucket"] + n for n in PER_FAMILY if "-windows-" in n}


def test_s3_v2_listing_follows_continuation_tokens(httpserver):
    keys = [f"v4/tarball/{n}" for n in MULTI_ARCH if "-windows-" in n] + ["v4/tarball/index.html", "other/x.txt"]
    bucket = FakeS3(keys, page_size=4)
    httpserver.expect_request("/bucket2/").respond_with_handler(bucket)
    base = httpserver.url_for("/bucket2/")
    entries = read_index(base + "?list-type=2&prefix=v4/tarball/therock-dist-windows-", fetch_text=get_text)
    expected = sorted(n for n in MULTI_ARCH if "-windows-" in n)
    assert sorted(e.name.filename for e in entries) == expected
    assert len(bucket.queries) == 3  # 10 keys, 4 per page
    assert "continuation-token" not in bucket.queries[0]
    assert all("continuation-token" in q and q["list-type"] == "2" for q in bucket.queries[1:])
    listing = IndexSource(index_url=base + "?list-type=2&prefix=v4/tarball/therock-dist-windows-")
    newest = resolve_tarball(platform="windows", groups="gfx1151", source=listing)
    assert newest.url == base + "v4/tarball/therock-dist-windows-gfx1151-10.1.0a20260822.tar.gz"


def test_truncated_s3_page_without_a_way_on_is_an_error(httpserver):
    httpserver.expect_request("/trunc/").respond_with_data(
        '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><IsTruncated>true</IsTruncated>'
        "</ListBucketResult>",
        content_type="application/xml",
    )
    with pytest.raises(FetchError, match="no next marker"):
        read_index(httpserver.url_for("/trunc/"), fetch_text=get_text)


# ------------------------------------------------------------------------------------- channels and host by date


def test_bundled_channels_file_matches_therock_hosts():
    channels = load_channels()
    assert {"nightly", "dev", "stable", "prerelease"} <= set(channels)
    nightly = channels["nightly"]
    assert nightly.host_for(D(2026, 9, 30)).url == "https://nightly.repo.amd.com/rocm/core/tarball/"
    assert nightly.host_for(D(2026, 8, 23)).url == "https://nightly.repo.amd.com/rocm/core/tarball/"
    assert nightly.host_for(D(2026, 8, 22)).url == "https://rocm.nightlies.amd.com/tarball-multi-arch/"
    assert nightly.host_for(D(2026, 5, 1)).url == "https://rocm.nightlies.amd.com/tarball-multi-arch/"
    assert nightly.host_for(D(2026, 3, 1)).url == "https://rocm.nightlies.amd.com/tarball/"
    # A date covered by both frozen hosts tries multi-arch, then per-family, then the current host.
    assert [h.url for h in nightly.hosts_for(D(2026, 6, 1))] == [
        "https://rocm.nightlies.amd.com/tarball-multi-arch/",
        "https://rocm.nightlies.amd.com/tarball/",
        "https://nightly.repo.amd.com/rocm/core/tarball/",
    ]


def test_latest_reads_the_host_that_covers_today(hosts, channels_file):
    server = hosts["server"]
    entry = resolve_tarball(
        platform="linux", groups="gfx1151", today=D(2026, 9, 15), source=IndexSource(channels_file=channels_file)
    )
    assert entry.name.version.text == "10.1.0a20260910"
    assert requested_paths(server) == ["/rocm/core/tarball/"]
    # Pretending it is 2026-07-01 reads the multi-arch host instead (and never the current one).
    server.clear_log()
    entry = resolve_tarball(
        platform="linux", groups="gfx1151", today=D(2026, 7, 1), source=IndexSource(channels_file=channels_file)
    )
    assert entry.name.version.text == "10.1.0a20260822"
    assert requested_paths(server) == ["/tarball-multi-arch/"]


def test_explicit_version_goes_to_the_host_for_its_date(hosts, channels_file):
    entry = resolve_tarball(
        platform="linux", groups="gfx1151", version="7.15.0a20260719", source=IndexSource(channels_file=channels_file)
    )
    assert entry.url == hosts["multi"] + "therock-dist-linux-gfx1151-7.15.0a20260719.tar.gz"
    assert requested_paths(hosts["server"]) == ["/tarball-multi-arch/"]


def test_explicit_version_falls_back_to_the_next_candidate_host(hosts, channels_file):
    # 2026-06-12 is covered by both frozen hosts; multi-arch (tried first) lacks it, the S3 bucket has it.
    entry = resolve_tarball(
        platform="linux", groups="gfx1151", version="7.14.0a20260612", source=IndexSource(channels_file=channels_file)
    )
    assert entry.url == hosts["bucket"] + "therock-dist-linux-gfx1151-7.14.0a20260612.tar.gz"
    assert entry.size is not None and entry.mtime == _mtime(entry.name.filename)
    paths = requested_paths(hosts["server"])
    assert paths[0] == "/tarball-multi-arch/" and set(paths[1:]) == {"/bucket/"}
    assert "/rocm/core/tarball/" not in paths


def test_explicit_version_on_an_unreachable_host_falls_back(hosts, tmp_path, httpserver):
    httpserver.expect_request("/down/").respond_with_data("upstream gone", status=503)
    quick = make_session(retries=1, backoff=0.01)  # the real default retries for ~45 s before giving up on a host

    def fetch_text(url: str) -> str:
        return get_text(url, session=quick)

    path = tmp_path / "c.yaml"
    path.write_text(
        f"channels:\n  nightly:\n    hosts:\n"
        f"      - {{url: '{httpserver.url_for('/down/')}', from: 2026-08-23}}\n"
        f"      - {{url: '{hosts['current']}', from: 2026-08-23}}\n",
        encoding="utf-8",
    )
    entry = resolve_tarball(
        platform="linux",
        groups="gfx1151",
        version="10.1.0a20260824",
        source=IndexSource(channels_file=path, fetch_text=fetch_text),
    )
    assert entry.url.startswith(hosts["current"])
    # Not found on the hosts that answered: the message says a host could not be read (it may hold the version).
    with pytest.raises(NotFoundError, match=r"nearest available: .*\(1 host\(s\) could not be read: .*HTTP 503"):
        resolve_tarball(
            platform="linux",
            groups="gfx1151",
            version="10.1.0a20260825",
            source=IndexSource(channels_file=path, fetch_text=fetch_text),
        )
    # When every host fails, the error is the fetch failure, not "not found".
    path.write_text(
        f"channels:\n  nightly:\n    hosts:\n      - url: {httpserver.url_for('/down/')}\n", encoding="utf-8"
    )
    with pytest.raises(FetchError, match="HTTP 503") as info:
        resolve_tarball(
            platform="linux",
            groups="gfx1151",
            version="10.1.0a20260824",
            source=IndexSource(channels_file=path, fetch_text=fetch_text),
        )
    assert not isinstance(info.value, NotFoundError)


def test_missing_version_names_the_nearest_by_date(hosts, channels_file):
    with pytest.raises(NotFoundError) as info:
        resolve_tarball(
            platform="linux",
            groups="gfx1151",
            version="10.1.0a20260901",
            source=IndexSource(channels_file=channels_file),
        )
    message = str(info.value)
    assert "\n" not in message
    nearest = message.split("nearest available: ")[1].split(", ")
    # By distance from 09-01: 08-24 (8 days), 09-10 and 08-23 (9, the newer first), 08-22 (10: every host was tried,
    # so the multi-arch host's files count), the BKC build of 08-14 (18).
    assert nearest == [
        "10.1.0a20260824", "10.1.0a20260910", "10.1.0a20260823", "10.1.0a20260822", "10.1.0a20260811+bkc.20260814",
    ]  # fmt: skip
    assert hosts["current"] in message and hosts["multi"] in message


def test_missing_group_lists_the_groups_that_are_there(hosts):
    with pytest.raises(NotFoundError) as info:
        list_tarballs(platform="linux", groups=["gfx1036"], index_url=hosts["current"])
    message = str(info.value)
    assert message.endswith("groups there for linux: gfx110X-all, gfx1151, gfx120X-all, multiarch")
    with pytest.raises(NotFoundError, match=r"groups there for windows: gfx110X-all, gfx1151$"):
        resolve_tarball(platform="windows", groups="gfx120X-all", source=IndexSource(index_url=hosts["current"]))


def test_missing_group_for_an_explicit_version_lists_groups_of_every_host_tried(hosts, channels_file):
    with pytest.raises(NotFoundError, match=r"groups there for linux: .*gfx103X-all.*gfx110X-dgpu.*multiarch"):
        resolve_tarball(
            platform="linux",
            groups="gfx1036",
            version="7.14.0a20260612",
            source=IndexSource(channels_file=channels_file),
        )


def test_legacy_group_names(hosts, channels_file):
    # Asking only for the old name finds the stale old files: the rename left -dgpu behind on 2025-11-20.
    stale = resolve_tarball(
        platform="linux",
        groups="gfx110X-dgpu",
        source=IndexSource(index_url=hosts["bucket"] + "?prefix=therock-dist-linux-"),
    )
    assert stale.name.version.text == "7.11.0a20251120"
    # current + legacy names: the newest file under either name.
    both = list_tarballs(
        platform="linux",
        groups=["gfx110X-all", "gfx110X-dgpu"],
        index_url=hosts["bucket"] + "?prefix=therock-dist-linux-",
    )
    assert [e.name.version.text for e in both] == [
        "7.14.0a20260612", "7.11.0a20251121", "7.11.0a20251120", "7.10.0a20251022", "7.9.0rc20251008",
    ]  # fmt: skip
    # An old version is found under the legacy name through the channel's date-based host choice.
    old = resolve_tarball(
        platform="linux",
        groups=["gfx110X-all", "gfx110X-dgpu"],
        version="7.10.0a20251022",
        source=IndexSource(channels_file=channels_file),
    )
    assert old.name.group == "gfx110X-dgpu" and old.url.startswith(hosts["bucket"])


def test_s3_channel_host_is_listed_per_platform(hosts, channels_file):
    entry = resolve_tarball(
        platform="windows", groups="gfx1151", today=D(2026, 3, 1), source=IndexSource(channels_file=channels_file)
    )
    assert entry.name.filename == "therock-dist-windows-gfx1151-7.14.0a20260612.tar.gz"
    assert {q["prefix"] for q in hosts["s3"].queries} == {"therock-dist-windows-"}


def test_max_age_flags_a_frozen_host(hosts):
    with pytest.raises(StaleInputError, match="is 95 days old"):
        resolve_tarball(
            platform="linux",
            groups="gfx1151",
            today=D(2026, 11, 25),
            max_age_days=14,
            source=IndexSource(index_url=hosts["multi"]),
        )
    fresh = resolve_tarball(
        platform="linux",
        groups="gfx1151",
        today=D(2026, 9, 12),
        max_age_days=14,
        source=IndexSource(index_url=hosts["current"]),
    )
    assert fresh.name.date == D(2026, 9, 10)


# ------------------------------------------------------------------------------------------------ bad input


def test_bad_inputs_are_typed_one_line_errors(tmp_path, hosts, channels_file):
    with pytest.raises(UsageError, match="unknown ROCm channel 'weekly'; known channels: nightly"):
        resolve_tarball(
            platform="linux", groups="gfx1151", channel="weekly", source=IndexSource(channels_file=channels_file)
        )
    with pytest.raises(UsageError, match="not a TheRock ROCm version"):
        resolve_tarball(
            platform="linux", groups="gfx1151", version="7.14", source=IndexSource(channels_file=channels_file)
        )
    with pytest.raises(UsageError, match="unknown platform"):
        list_tarballs(platform="macos", groups="gfx1151", index_url=hosts["current"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("channels:\n  nightly:\n    hosts:\n      - url: x\n        from: someday\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="'someday' is not a date"):
        load_channels(bad)
    bad.write_text("channels: [\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_channels(bad)
    bad.write_text("channels:\n  nightly:\n    hosts:\n      - url: x\n        listing: ftp\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="listing 'ftp'"):
        load_channels(bad)


def test_default_fetch_text_maps_http_failures(httpserver):
    """The default reader is the shared downloader's get_text: retries, then one-line errors naming the URL."""
    httpserver.expect_request("/ok").respond_with_data("hello")
    httpserver.expect_request("/gone").respond_with_data("no", status=404)
    httpserver.expect_request("/err").respond_with_data("no", status=500)
    assert get_text(httpserver.url_for("/ok")) == "hello"
    with pytest.raises(NotFoundError, match="404"):
        get_text(httpserver.url_for("/gone"))
    quick = make_session(retries=1, backoff=0.01)
    with pytest.raises(FetchError, match="500"):
        get_text(httpserver.url_for("/err"), session=quick)
    with pytest.raises(FetchError, match="127.0.0.1:9"):
        get_text("http://127.0.0.1:9/", session=quick, timeout=(2, 2))
