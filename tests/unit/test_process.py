"""The subprocess runner: explicit environments without secrets, logs, tails, timeouts, process groups."""

from __future__ import annotations

import sys
import time

import pytest

from rockbuild.process import Output, ProcessError, child_env, is_secret, log_tail, run, spawn, stop

PY = sys.executable


def test_child_env_keeps_the_allowlist_and_drops_every_secret():
    base = {
        "PATH": "/bin",
        "HOME": "/root",
        "LC_ALL": "C",
        "GITHUB_TOKEN": "ghp_x",
        "GH_TOKEN": "x",
        "HF_TOKEN": "x",
        "MY_API_KEY": "x",
        "AWS_SECRET_ACCESS_KEY": "x",
        "RANDOM_VAR": "y",
    }
    env = child_env({"ROCM_PATH": "/opt/rocm", "HF_TOKEN": "passed-by-mistake"}, base=base)
    assert env == {"PATH": "/bin", "HOME": "/root", "LC_ALL": "C", "ROCM_PATH": "/opt/rocm"}
    assert all(is_secret(k) for k in ("GITHUB_TOKEN", "gh_token", "HF_TOKEN", "DB_PASSWORD", "MY_API_KEY"))


def test_a_child_reaches_the_network_as_this_machine_does():
    """Behind a TLS-inspecting proxy npm, git and CMake need the proxy and the CA bundle that trusts it (the
    rehearsal's webui root: npm ci failed with SELF_SIGNED_CERT_IN_CHAIN when NODE_EXTRA_CA_CERTS was dropped)."""
    base = {
        "PATH": "/bin",
        "https_proxy": "http://proxy:3128",
        "NO_PROXY": "localhost",
        "SSL_CERT_FILE": "/ca.crt",
        "NODE_EXTRA_CA_CERTS": "/ca.crt",
        "GIT_SSL_CAINFO": "/ca.crt",
        "NPM_TOKEN": "x",
        "PROXY_PASSWORD": "x",
    }
    assert child_env(base=base) == {
        "PATH": "/bin",
        "https_proxy": "http://proxy:3128",
        "NO_PROXY": "localhost",
        "SSL_CERT_FILE": "/ca.crt",
        "NODE_EXTRA_CA_CERTS": "/ca.crt",
        "GIT_SSL_CAINFO": "/ca.crt",
    }


def test_a_child_never_sees_a_token_even_if_the_caller_passes_one(monkeypatch, tmp_path):
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_secret_value")
    result = run([PY, "-c", "import os; print(sorted(os.environ))"], env={"PATH": "/usr/bin", "GH_TOKEN": "x"})
    assert "GITHUB_TOKEN" not in result.output and "GH_TOKEN" not in result.output
    default = run([PY, "-c", "import os; print(os.environ.get('GITHUB_TOKEN'))"])
    assert default.output.strip() == "None"


def test_output_goes_to_the_log_and_to_on_line(tmp_path):
    log = tmp_path / "step.log"
    seen: list[str] = []
    result = run(
        [PY, "-c", "import sys; print('one', flush=True); print('two', file=sys.stderr)"],
        log=log,
        output=Output(on_line=seen.append),
    )
    assert result.returncode == 0 and seen == ["one", "two"]
    assert log.read_text().splitlines() == ["one", "two"]


def test_failure_carries_the_tail_and_the_log_path(tmp_path):
    log = tmp_path / "fail.log"
    script = "import sys\nfor i in range(100): print(f'line {i}')\nsys.exit(3)"
    with pytest.raises(ProcessError) as info:
        run([PY, "-c", script], log=log, output=Output(tail_lines=5))
    err = info.value
    assert err.returncode == 3 and err.tail == [f"line {i}" for i in range(95, 100)]
    assert "exit code 3" in err.message and str(log) in err.message and "\n" not in err.message
    assert log_tail(log, 2) == ["line 98", "line 99"]
    assert run([PY, "-c", "raise SystemExit(4)"], check=False).returncode == 4


def test_missing_command_is_one_line():
    with pytest.raises(ProcessError, match="no-such-tool-xyz: command not found"):
        run(["no-such-tool-xyz"])


def test_spawn_and_stop(tmp_path):
    log = tmp_path / "server.log"
    proc = spawn([PY, "-c", "import time; print('up', flush=True); time.sleep(60)"], log=log)
    for _ in range(50):
        if "up" in log.read_text():
            break
        time.sleep(0.1)
    assert stop(proc) != 0 and proc.poll() is not None


def test_podman_gets_the_sbin_folders_on_path():
    """podman's network plugins run iptables (/usr/sbin): a caller's PATH without it made `podman run -p` fail."""
    from rockbuild.image.podman import podman_env

    env = podman_env({"PATH": "/usr/bin:/bin", "HOME": "/root"})
    assert env["PATH"].split(":") == ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
    assert podman_env({"PATH": "/sbin:/usr/bin:/usr/sbin"})["PATH"] == "/sbin:/usr/bin:/usr/sbin"
