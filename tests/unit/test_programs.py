"""matrices/programs.yaml: the shipped list loads, and each mistake in a list is one ConfigError naming file:line."""

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
    server = next(p for p in programs.programs if p.target == "llama-server")
    assert server.known_failure is not None and server.known_failure.ships == ("libwinpthread-1.dll",)
    assert server.known_failure.applies_to(["llama-server.exe", "LibWinPthread-1.dll"])
    assert not server.known_failure.applies_to(["llama-server", "libstdc++.so.6"])


@pytest.mark.parametrize(("text", "message"), [
    ("ship:\n  - {target: llama-cli, chek: [--help]}\n", r"programs.yaml:2: unknown key 'chek' .*did you mean check"),
    ("ship:\n  - {target: llama-cli, exit: 300}\n", r":2: exit must be an exit code \(0-255\), not 300"),
    ("ship:\n  - {target: llama-cli, expect: '(unclosed'}\n", r":2: expect is not a regular expression"),
    ("ship:\n  - {target: llama-cli}\n  - {target: llama-cli}\n", r"llama-cli is listed twice \(in ship and ship\)"),
    ("ship:\n  - {target: llama-cli}\nleft_out:\n  - {target: llama-x}\n", r":4: a program left out needs its reason"),
    ("ship:\n  - {target: '../evil'}\n", r":2: a ship entry needs a target"),
    ("ship: []\n", r"ship must be a non-empty list"),
    ("- llama-cli\n", r"expected a mapping with 'ship'"),
    ("ship:\n  - {target: llama-cli, known_failure: {failure: x, reason: y}}\n", r":2: known_failure needs ships"),
    ("ship:\n  - {target: llama-cli, known_failure: {ships: [a.dll], reason: y}}\n",
     r":2: known_failure needs a failure"),
    ("ship:\n  - {target: llama-cli, known_failure: {ships: [a.dll], failure: x, reason: y, timeout: 0}}\n",
     r":2: timeout must be a number of seconds above 0, not 0"),
    ("ship:\n  - {target: llama-cli, known_failure: {ships: [a.dll], failure: x, reason: y, when: 1}}\n",
     r":2: unknown key 'when'"),
])
def test_each_mistake_is_named(tmp_path, text, message):
    path = tmp_path / "programs.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=message):
        load_programs(path)
