"""config/programs.yaml: the shipped list loads, and each mistake in a list is one ConfigError naming file:line."""

from __future__ import annotations

import pytest

from rockbuild.core.errors import ConfigError
from rockbuild.core.programs import load_programs


def test_the_shipped_list():
    programs = load_programs()
    names = programs.names()
    assert names[:4] == ("llama-cli", "llama-server", "llama-bench", "ggml-rpc-server")
    assert {"llama-perplexity", "llama-quantize", "llama-mtmd-cli", "llama-app"} <= set(names)
    assert all(p.required for p in programs.programs[:4]) and not programs.programs[4].required
    left = {lo.target: lo.reason for lo in programs.left_out}
    assert "GGML_BACKEND_DL" in left["llama-export-lora"] and "stub" in left["llama-llava-cli"]
    quantize = next(p for p in programs.programs if p.target == "llama-quantize")
    assert (quantize.check, quantize.exit_code) == (("--help",), 1)
    # the winpthreads hang at exit (issue 29): every program of a mingw-w64 build, only after it printed its output
    (hang,) = programs.known_failures
    assert all(p.known_failures == (hang,) for p in programs.programs)
    assert (hang.ships, hang.failure, hang.after_output, hang.timeout) == (
        ("libwinpthread-1.dll",),
        "timed out",
        True,
        15.0,
    )
    assert hang.applies_to(["llama-server.exe", "LibWinPthread-1.dll"])
    assert not hang.applies_to(["llama-server", "libstdc++.so.6"])


def test_a_known_failure_names_the_programs_it_hits(tmp_path):
    path = tmp_path / "programs.yaml"
    path.write_text(
        "ship:\n  - {target: llama-cli}\n  - {target: llama-server}\nknown_failures:\n"
        "  - {ships: [a.dll], programs: [llama-server], failure: timed out, reason: r, after_output: false}\n"
    )
    programs = {p.target: p for p in load_programs(path).programs}
    assert programs["llama-cli"].known_failures == ()
    (known,) = programs["llama-server"].known_failures
    assert known.programs == ("llama-server",) and not known.after_output and known.timeout is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "ship:\n  - {target: llama-cli, chek: [--help]}\n",
            r"programs.yaml:2: unknown key 'chek' .*did you mean check",
        ),
        ("ship:\n  - {target: llama-cli, exit: 300}\n", r":2: exit must be an exit code \(0-255\), not 300"),
        ("ship:\n  - {target: llama-cli, expect: '(unclosed'}\n", r":2: expect is not a regular expression"),
        (
            "ship:\n  - {target: llama-cli}\n  - {target: llama-cli}\n",
            r"llama-cli is listed twice \(in ship and ship\)",
        ),
        (
            "ship:\n  - {target: llama-cli}\nleft_out:\n  - {target: llama-x}\n",
            r":4: a program left out needs its reason",
        ),
        ("ship:\n  - {target: '../evil'}\n", r":2: a ship entry needs a target"),
        ("ship: []\n", r"ship must be a non-empty list"),
        ("- llama-cli\n", r"expected a mapping with 'ship'"),
        (
            "ship:\n  - {target: llama-cli}\nknown_failures:\n  - {failure: x, reason: y}\n",
            r":4: a known failure needs ships",
        ),
        (
            "ship:\n  - {target: llama-cli}\nknown_failures:\n  - {ships: [a.dll], reason: y}\n",
            r":4: a known failure needs a failure",
        ),
        (
            "ship:\n  - {target: llama-cli}\nknown_failures:\n  - {ships: [a.dll], failure: x, reason: y, timeout: 0}\n",
            r":4: timeout must be a number of seconds above 0, not 0",
        ),
        (
            "ship:\n  - {target: llama-cli}\nknown_failures:\n  - {ships: [a.dll], failure: x, reason: y, when: 1}\n",
            r":4: unknown key 'when'",
        ),
        (
            "ship:\n  - {target: llama-cli}\nknown_failures:\n  - {ships: [a.dll], failure: x, reason: y, programs: [llama-x]}\n",
            r"a known failure names llama-x, which ship does not list",
        ),
        ("ship:\n  - {target: llama-cli}\nknown_failures: {ships: [a.dll]}\n", r":3: known_failures must be"),
    ],
)
def test_each_mistake_is_named(tmp_path, text, message):
    path = tmp_path / "programs.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=message):
        load_programs(path)
