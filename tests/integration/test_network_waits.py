"""No silent wait, no endless one (issue 57, finding 3): against a server that accepts the connection and never
answers, each command that asks a small question of the network (``install``'s release, ``rocm list``'s and
``resolve``'s index page, ``perf``'s GitHub API) announces every try again in one warning naming the host, gives up
after the run's timeouts ($ROCKBUILD_HTTP_TIMEOUT, $ROCKBUILD_HTTP_RETRIES: 1 s and 2 here, to stay fast) and ends in
one line naming the host and what timed out. A download keeps its longer timeout ($ROCKBUILD_DOWNLOAD_TIMEOUT) and
its retries, announced the same way; a wait that lasts says what it waits for while nothing arrives."""

from __future__ import annotations

import re
import time

import pytest
from support.faultserver import SilentServer
from support.git import git

from rockbuild.core.environment import HttpTimeouts
from rockbuild.core.errors import FetchError, UnreachableError

FAST = {"ROCKBUILD_HTTP_TIMEOUT": "1", "ROCKBUILD_HTTP_RETRIES": "2"}
BOUND = 15.0  # 3 tries of 1 s and 1 s of backoff take 4 s; a busy 2-core machine gets the rest (never 376 s)


@pytest.fixture
def silent():
    with SilentServer() as server:
        yield server


def timed(run_rockbuild, *args: str, env: dict[str, str] | None = None):
    start = time.monotonic()
    result = run_rockbuild(*args, env={**FAST, **(env or {})}, timeout=120)
    return result, time.monotonic() - start


def assert_tries_announced(stderr: str, host: str, path: str) -> None:
    """Two warnings, one before each try again, naming the host, the reason and the request; then one error line."""
    retries = [line for line in stderr.splitlines() if line.startswith("warning:")]
    assert retries == [
        f"warning: {host}: read timed out after 1s (GET {path}); try 2 of 3 now",
        f"warning: {host}: read timed out after 1s (GET {path}); try 3 of 3 in 1s",
    ], stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"{host} did not answer within 1s, 3 tries (read timed out)" in errors[0], stderr
    assert "Traceback" not in stderr


def test_install_gives_up_on_a_silent_api_in_seconds_and_says_each_try(run_rockbuild, silent, tmp_path):
    result, took = timed(
        run_rockbuild, "install", "--api-url", silent.base_url, "--target", "gfx1151", "--dest", str(tmp_path / "llama")
    )
    assert result.returncode == 4 and took < BOUND, (took, result.stderr)
    assert_tries_announced(result.stderr, silent.host, "/repos/lemonade-sdk/llamacpp-rocm/releases/latest")
    assert result.stderr.splitlines()[-2] == (
        f"error: cannot fetch {silent.base_url}/repos/lemonade-sdk/llamacpp-rocm/releases/latest: {silent.host} did "
        "not answer within 1s, 3 tries (read timed out)"
    )
    assert result.stderr.splitlines()[-1] == (
        "hint: check the network; to wait longer, set ROCKBUILD_HTTP_TIMEOUT=SECONDS (docs/errors.md)"
    )
    assert silent.connections == 3  # the three tries, and not one more


def test_rocm_list_gives_up_on_a_silent_index(run_rockbuild, silent):
    result, took = timed(run_rockbuild, "rocm", "list", "--family", "gfx1151", "--index-url", f"{silent.base_url}/")
    assert result.returncode == 4 and took < BOUND, (took, result.stderr)
    assert_tries_announced(result.stderr, silent.host, "/")


def test_resolve_gives_up_on_a_silent_index(run_rockbuild, silent, tmp_path):
    upstream = tmp_path / "llama.cpp"
    upstream.mkdir()
    git("init", "-q", "-b", "master", cwd=upstream)
    git("commit", "-q", "--allow-empty", "-m", "b1", cwd=upstream)
    git("tag", "b1", cwd=upstream)
    result, took = timed(
        run_rockbuild,
        "resolve",
        "--os",
        "linux",
        "--target",
        "gfx1151",
        "--git-url",
        str(upstream),
        "--llama-ref",
        "b1",
        "--index-url",
        f"{silent.base_url}/",
        "--out",
        str(tmp_path / "in.json"),
    )
    assert result.returncode == 4 and took < BOUND, (took, result.stderr)
    assert_tries_announced(result.stderr, silent.host, "/")


def test_perf_gives_up_on_a_silent_github_api(run_rockbuild, silent):
    """PyGithub's own retries: the same timeouts, each try again announced the same way."""
    result, took = timed(run_rockbuild, "perf", "--repo", "o/r", "--api-url", silent.base_url)
    assert result.returncode == 12 and took < BOUND, (took, result.stderr)
    assert_tries_announced(result.stderr, silent.host, "/repos/o/r")
    assert f"error: reading the repository o/r failed: {silent.host} did not answer" in result.stderr
    assert silent.connections == 3


def test_a_wait_says_what_it_waits_for_before_ten_silent_seconds(run_rockbuild, silent, tmp_path):
    """One try of 6 s: after 5 s without an answer a line says what is awaited, and the timeout ends it."""
    result, took = timed(
        run_rockbuild,
        "install",
        "--api-url",
        silent.base_url,
        "--target",
        "gfx1151",
        "--dest",
        str(tmp_path / "llama"),
        env={"ROCKBUILD_HTTP_TIMEOUT": "6", "ROCKBUILD_HTTP_RETRIES": "0"},
    )
    assert result.returncode == 4 and 6 <= took < 6 + BOUND, (took, result.stderr)
    path = "/repos/lemonade-sdk/llamacpp-rocm/releases/latest"
    assert re.search(
        rf"^    waiting for {re.escape(silent.host)} \(GET {re.escape(path)}\): nothing for [56]s "
        r"\(6s timeout\)$",
        result.stderr,
        re.M,
    ), result.stderr
    assert f"{silent.host} did not answer within 6s (read timed out)" in result.stderr  # one try: no count
    assert "warning:" not in result.stderr and silent.connections == 1


def test_a_bad_timeout_is_one_line(run_rockbuild):
    result = run_rockbuild("matrix", env={"ROCKBUILD_HTTP_TIMEOUT": "soon"})
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["error: ROCKBUILD_HTTP_TIMEOUT='soon' is not a number of seconds above 0"]


# ---------------------------------------------------------------------------------------------------------------------
# The functions, in this process


@pytest.fixture
def fast_network():
    from rockbuild import downloader

    downloader.configure(HttpTimeouts(request=1.0, retries=1, download=1.0))
    yield
    downloader.configure(HttpTimeouts())


def test_get_text_takes_the_configured_timeouts_and_announces_each_retry(silent, fast_network, capsys):
    from rockbuild.downloader import get_text

    start = time.monotonic()
    with pytest.raises(FetchError) as failed:
        get_text(f"{silent.base_url}/index.html")
    assert time.monotonic() - start < BOUND
    assert not isinstance(failed.value, UnreachableError)  # it was reached: it did not answer
    assert failed.value.message == (
        f"cannot fetch {silent.base_url}/index.html: {silent.host} did not answer within 1s, 2 tries (read timed out)"
    )
    assert capsys.readouterr().err.splitlines() == [
        f"warning: {silent.host}: read timed out after 1s (GET /index.html); try 2 of 2 now"
    ]
    assert silent.connections == 2


def test_a_download_keeps_its_own_timeout_and_retries_announced(silent, fast_network, capsys, tmp_path):
    from rockbuild.downloader import Downloader, TransferPolicy

    with (
        pytest.raises(FetchError) as failed,
        Downloader(tmp_path, policy=TransferPolicy(retries=2, backoff=0.01)) as dl,
    ):
        dl.fetch(f"{silent.base_url}/rocm.tar.gz")
    assert failed.value.message == (
        f"could not download {silent.base_url}/rocm.tar.gz: {silent.host} did not answer "
        "within 1s, 3 tries (read timed out)"
    )
    assert failed.value.hint is not None and "ROCKBUILD_DOWNLOAD_TIMEOUT" in failed.value.hint
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert warnings == [
        f"warning: {silent.host}: read timed out after 1s (GET /rocm.tar.gz); try 2 of 3 now",
        f"warning: {silent.host}: read timed out after 1s (GET /rocm.tar.gz); try 3 of 3 in 0.02s",
    ]
    assert silent.connections == 3
