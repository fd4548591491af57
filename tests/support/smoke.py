"""Stand-ins for llama.cpp's programs in the smoke tests: small Python programs that behave like llama-cli,
llama-server (a real HTTP server with /health and /v1/chat/completions) and llama-bench, printing output captured from
llama.cpp (tests/fixtures/smoke), and a job folder holding them as its bundle."""

from __future__ import annotations

import json
import struct
import sys
import textwrap
from pathlib import Path

from support import paths

FIXTURES = paths.FIXTURES / "smoke"

COMMON = """
import json, os, sys, time
from pathlib import Path
FIX = Path({fixtures!r})
MODE = {mode!r}
Path({envlog!r}).joinpath(Path(sys.argv[0]).name + ".env.json").write_text(json.dumps(dict(os.environ)))
Path({envlog!r}).joinpath(Path(sys.argv[0]).name + ".argv.json").write_text(json.dumps(sys.argv))
Path({envlog!r}).joinpath(Path(sys.argv[0]).name + ".calls").open("a").write(json.dumps(sys.argv) + "\\n")
def arg(flag, default=None):
    return sys.argv[sys.argv.index(flag) + 1] if flag in sys.argv else default
LOAD = (FIX / ("rocm0-buffers.constructed.txt" if MODE.get("gpu") else "completion-lv4-cpu.txt")).read_text()
VK = MODE.get("vk")  # a Vulkan bundle: "lavapipe" (the device is there), "none" (no driver), "noloader"
if VK == "noloader":
    sys.stderr.write(Path(sys.argv[0]).name + ": error while loading shared libraries: libvulkan.so.1: cannot open "
                     "shared object file: No such file or directory\\n")
    sys.exit(127)
if VK and "-dev" in sys.argv and arg("-dev") != "none" and (VK != "lavapipe" or arg("-dev") != "Vulkan0"):
    sys.stderr.write('error while handling argument "-dev": invalid device: ' + arg("-dev") + "\\n")
    sys.exit(1)
if sys.argv[1:] in (["--version"], ["--help"]):  # the smoke's program checks (config/programs.yaml)
    print("version: 11312 (0c1e570)" if sys.argv[1] == "--version" else "usage: " + sys.argv[0] + " [options]")
    sys.exit(0)
if "--list-devices" in sys.argv:
    print("Available devices:")
    # MODE["vk_name"]: another device than lavapipe's (a real GPU: "NVIDIA H200")
    name = MODE.get("vk_name", "llvmpipe (LLVM 22.1.8, 256 bits)")
    print("  Vulkan0: " + name + " (24105 MiB, 23528 MiB free)" if VK == "lavapipe" else "  (none)")
    sys.exit(0)
if VK:
    LOAD = (FIX / ("vulkan-completion-lv4.txt" if VK == "lavapipe" else "vulkan-no-icd.constructed.txt")).read_text()
"""

CLI = """
if MODE.get("cli") == "hang":
    print("Loading model...", flush=True)
    time.sleep(600)
if MODE.get("cli") == "crash":
    sys.stderr.write("error: failed to load model\\n")
    sys.exit(1)
sys.stderr.write(LOAD)
out = (FIX / "cli-st-stdout.txt").read_text().replace("> hello", "> " + arg("-p"))
if MODE.get("cli") == "empty":
    out = out.replace(out.split("\\n")[6], "")
sys.stdout.write(out)
sys.stderr.write((FIX / "cli-lv4-stderr.txt").read_text())
"""

SERVER = """
import http.server, signal
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
if MODE.get("server") == "die":
    sys.stderr.write("error: cannot open model\\n")
    sys.exit(3)
sys.stderr.write(LOAD)
sys.stderr.flush()
START = time.monotonic()
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        sys.stderr.write("request: " + (a[0] % a[1:]) + "\\n")
    def _send(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        if self.path == "/" and MODE.get("ui") in ("html", "chat"):
            page = CHAT_PAGE if MODE["ui"] == "chat" else "<!doctype html><html><body>llama.cpp</body></html>"
            data = page.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            return self.wfile.write(data)
        if self.path == "/health":
            if time.monotonic() - START < 0.3:
                return self._send(503, {{"error": {{"code": 503, "message": "Loading model"}}}})
            return self._send(200, {{"status": "ok"}})
        self._send(404, {{}})
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Path({envlog!r}).joinpath("request.json").write_text(json.dumps(body))
        if MODE.get("server") == "slow":
            time.sleep(600)
        if self.path == "/completion":  # the long known answer: the pass key of the prompt, or MODE["long"] forget
            import re
            key = re.search(r"The pass key is (\\d+)", body["prompt"]).group(1)
            if MODE.get("long") in ("small-model", "small-context"):  # llama-server's answer to a too long prompt
                if MODE["long"] == "small-model":  # what it logs when the model was trained on a short context
                    print("srv    load_model: the slot context (8192) exceeds the training context of the model "
                          "(512) - capping", file=sys.stderr, flush=True)
                return self._send(400, {{"error": {{"code": 400, "type": "exceed_context_size_error",
                    "message": "request (4739 tokens) exceeds the available context size (512 tokens), try "
                    "increasing it", "n_prompt_tokens": 4739, "n_ctx": 512}}}})
            said = " 12345. The" if MODE.get("long") == "forget" else " " + key + ". Remember"
            tokens = 900 if MODE.get("long") == "short" else len(body["prompt"]) // 4
            return self._send(200, {{"content": said, "tokens_evaluated": tokens, "stop": True}})
        self._send(200, json.loads((FIX / "server-reply.json").read_text()))
CHAT_PAGE = {chat_page!r}
srv = http.server.HTTPServer(("127.0.0.1", int(arg("--port"))), H)
Path({envlog!r}).joinpath("server.pid").write_text(str(os.getpid()))
srv.serve_forever()
"""

BENCH = """
sys.stderr.write("0.00.001.000 I llama-bench: loading\\n")
if MODE.get("bench") == "crash":
    os.kill(os.getpid(), 11)
if MODE.get("bench") == "garbage":
    print("| model | size |")
    sys.exit(0)
sys.stdout.write((FIX / ("vulkan-bench.constructed.txt" if VK == "lavapipe" else "bench.json.txt")).read_text())
"""

# A --kl-divergence-base file in perplexity.cpp's format (rockbuild/smoke/logprobs.py), small: a vocabulary of 8.
# From position ``drift_from`` on, every fourth position's top token moves to the next one.
LONG_BASE = """
def write_long_base(path, n_ctx, drift_from=None):
    import struct
    n_vocab = 8
    out = bytearray(b"_logits_" + struct.pack("<Iii", n_ctx, n_vocab, 1))
    out += struct.pack("<%di" % n_ctx, *[(i * 7) % n_vocab for i in range(n_ctx)])
    for r in range(n_ctx - 1 - n_ctx // 2):
        top = (r * 3) % n_vocab
        if drift_from is not None and n_ctx // 2 + 1 + r >= drift_from and r % 4 == 0:
            top = (top + 1) % n_vocab
        logp = [-0.2 if v == top else -4.5 - 0.1 * v for v in range(n_vocab)]
        lo, hi = min(logp), max(logp)
        scale = (hi - lo) / 65535
        out += struct.pack("<ff", scale, lo) + struct.pack("<%dH" % n_vocab, *[round((x - lo) / scale) for x in logp])
    open(path, "wb").write(bytes(out))
    return path
"""

# llama-perplexity as tools/perplexity/perplexity.cpp prints: the CPU base run (--kl-divergence-base without
# --kl-divergence) writes the base file and its final PPL; the GPU run prints the KL divergence block. MODE["numerics"]:
# pass | wrong (a wrong kernel: KLD 40x the floor) | garbage | nan | crash (the GPU run dies) | cpu-crash
PERPLEXITY = """
N = MODE.get("numerics", "pass")
Path({envlog!r}).joinpath("perplexity.calls").open("a").write(json.dumps(sys.argv) + "\\n")
Path({envlog!r}).joinpath("perplexity.cwd").open("a").write(os.getcwd() + "\\n")
LONG = "-ub" in sys.argv  # the long-context runs (rockbuild/smoke/longctx.py): one sequence, llama-server's batches
if "--kl-divergence" not in sys.argv and LONG:
    if MODE.get("long") == "cpu-crash":
        os.kill(os.getpid(), 11)
    # MODE["long"] drift: a fault in code every backend runs, from position 3,072 on (rockbuild's own mutant (b));
    # gpu-drift: the same fault in the GPU's code only (its own run: -dev Vulkan0), which the GPU-vs-CPU figures
    # below do not see (rockbuild's mutants (e) and (f) on a real GPU)
    on_gpu = arg("-dev") != "none"
    if MODE.get("long") == "gpu-crash" and on_gpu:
        os.kill(os.getpid(), 11)
    drift = MODE.get("long") == "drift" or (MODE.get("long") == "gpu-drift" and on_gpu)
    write_long_base(arg("--kl-divergence-base"), int(arg("-c")), 3072 if drift else None)
    print("perplexity: calculating perplexity over 1 chunks, n_ctx=" + arg("-c") + ", batch_size=2048, n_seq=1")
    print("Final estimate: PPL = 52.1555 +/- 3.76961")
    sys.exit(0)
if "--kl-divergence" not in sys.argv:
    if N == "cpu-crash":
        os.kill(os.getpid(), 11)
    Path(arg("--kl-divergence-base")).write_bytes(b"_logits_" + bytes(64))
    print("perplexity: calculating perplexity over 8 chunks, n_ctx=256, batch_size=256, n_seq=1")
    # SmolLM2's figure on the numerics text (config/baselines.yaml: 24.7663 +- 2 %); MODE["cpu_ppl"]: another one
    # (a model broken on every backend: the sign-flipped SmolLM2 gave 1.5e15)
    PPL_CPU = MODE.get("cpu_ppl", "24.7912")
    print("[1]19.1234,[2]20.2345,[3]21.0000,[4]22.5000,[5]23.9000,[6]24.1000,[7]24.6000,[8]" + PPL_CPU + ",")
    print("Final estimate: PPL = " + PPL_CPU + " +/- 0.45678")
    sys.exit(0)
assert Path(arg("--kl-divergence-base")).read_bytes().startswith(b"_logits_"), "no base file"
if N == "crash":
    sys.stderr.write("ggml_vulkan: device lost\\n")
    os.kill(os.getpid(), 11)
KLD, TOP, PPL = {{"pass": (0.0057, 96.4, 12.41), "wrong": (0.26, 71.2, 19.8), "garbage": (9.81, 0.8, 59000.0),
                 "nan": ("nan", "nan", "nan")}}[N]
def f(v, spec):
    return v if isinstance(v, str) else format(v, spec)
print("====== Perplexity statistics ======")
print("Mean PPL(Q)                   :  " + f(PPL, "10.6f") + " ±   0.400000")
print("Mean PPL(base)                :   12.345600 ±   0.456780")
print("====== KL divergence statistics ======")
print("Mean    KLD:   " + f(KLD, "10.6f") + " ±   0.000300")
print("Maximum KLD:   " + f(KLD if isinstance(KLD, str) else KLD * 28, "10.6f"))
print("99.0%   KLD:   " + f(KLD if isinstance(KLD, str) else KLD * 9, "10.6f"))
print("Median  KLD:   " + f(KLD if isinstance(KLD, str) else KLD / 3, "10.6f"))
print("====== Token probability statistics ======")
print("Same top p: " + f(TOP, "6.3f") + " ± 0.412 %")
"""

# llama-completion -p PROMPT -no-cnv --temp 0: the prompt, then what SmolLM2-135M-Instruct answers greedily on the CPU
# (issue 26); MODE["answers"] wrong: a broken model's noise, on the GPU only with MODE["answers_on"] == "gpu"
COMPLETION = """
RIGHT = {{"The capital of France is": " Paris. It is", "1, 2, 3, 4, 5, 6,": " 7, 8, 9,",
         "The opposite of hot is": " cold. The"}}
prompt = arg("-p")
gpu = arg("-dev") not in (None, "none")
# STANDIN_ANSWERS=wrong: set by a program a "computes wrong" ROCm nightly compiled (tests/integration/test_fallback.py)
wrong = (MODE.get("answers") == "wrong" or os.environ.get("STANDIN_ANSWERS") == "wrong") and (
    MODE.get("answers_on", "all") == "all" or gpu)
sys.stderr.write("llama_model_loader: loaded meta data with 30 key-value pairs\\n")
sys.stdout.write(prompt + (" 1111 sum sum sum" if wrong else RIGHT.get(prompt, " something")))
sys.stdout.write("\\n\\n")
sys.stderr.write("common_perf_print:    sampling time =       0.50 ms\\n")
"""


# A chat page shaped like llama.cpp's (the selectors of smoke.yaml's run.browser find its chat box, send button and
# answer): the message goes to /v1/chat/completions, the answer shows word by word, as a streamed one does.
CHAT_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>llama.cpp - chat</title>
<style>body{font:16px sans-serif;margin:2em} .user{font-weight:bold} textarea{width:30em;height:4em}</style></head>
<body><main id="chat"></main>
<form id="form"><textarea placeholder="Ask anything..."></textarea><button type="submit">Send</button></form>
<script>
const form = document.getElementById("form"), box = form.querySelector("textarea"), chat = document.getElementById("chat");
form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const text = box.value;
  box.value = "";
  const user = document.createElement("div");
  user.className = "user";
  user.textContent = text;
  chat.appendChild(user);
  const group = document.createElement("div");
  group.setAttribute("role", "group");
  group.setAttribute("aria-label", "Assistant message with actions");
  const answer = document.createElement("div");
  answer.className = "markdown-content";
  group.appendChild(answer);
  chat.appendChild(group);
  const reply = await fetch("/v1/chat/completions", {method: "POST", headers: {"Content-Type": "application/json"},
                                                     body: JSON.stringify({messages: [{role: "user", content: text}]})});
  const words = (await reply.json()).choices[0].message.content.split(" ");
  for (const word of words) {
    answer.textContent += word + " ";
    await new Promise((done) => setTimeout(done, 20));
  }
});
</script></body></html>
"""


def write_stand_ins(folder: Path, envlog: Path, mode: dict | None = None) -> Path:
    """llama-cli, llama-server and llama-bench stand-ins in ``folder``, behaving as ``mode`` says and recording their
    environment and arguments in ``envlog``."""
    head = COMMON.format(fixtures=str(FIXTURES), mode=mode or {}, envlog=str(envlog))
    for name, body in (
        ("llama-cli", CLI),
        ("llama-server", SERVER.format(envlog=str(envlog), chat_page=CHAT_PAGE)),
        ("llama-bench", BENCH),
        ("ggml-rpc-server", "sys.exit(1)\n"),
        ("llama-completion", "sys.exit(1)\n"),
        ("llama-perplexity", None),
    ):
        if name == "llama-perplexity":
            if "numerics" not in (mode or {}):
                continue
            body = LONG_BASE + PERPLEXITY.format(envlog=str(envlog))
        if name == "llama-completion" and "numerics" in (mode or {}):
            body = COMPLETION.format()
        path = folder / name
        path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(head) + textwrap.dedent(body))
        path.chmod(0o755)
    return folder


def make_bundle(
    root: Path, mode: dict | None = None, *, targets=("gfx1151",), web_ui: dict | None = None
) -> tuple[Path, Path]:
    """out/<job>/bundle with fake llama binaries; returns (job dir, folder where the fakes record env/argv).
    ``mode["vk"]`` makes it a Vulkan bundle (it holds a libggml-vulkan.so); ``mode["ui"]`` html | chat makes the
    server answer ``GET /`` with a page (else 404); ``web_ui`` is build.json's."""
    job = root / "out" / "linux-gfx1151"
    bundle = job / "bundle"
    bundle.mkdir(parents=True)
    if (mode or {}).get("vk"):
        targets = ()
        (bundle / "libggml-vulkan.so").write_bytes(b"")
    envlog = root / "envlog"
    envlog.mkdir()
    build = {"status": "ok", "job": {"id": "linux-gfx1151", "os": "linux", "targets": list(targets)}}
    if web_ui is not None:
        build["web_ui"] = web_ui
    (job / "build.json").write_text(json.dumps(build))
    (bundle / "bundle.json").write_text(json.dumps({"platform": "linux", "targets": list(targets)}))
    write_stand_ins(bundle, envlog, mode)
    return job, envlog


def write_long_base(path: Path, n_ctx: int, drift_from: int | None = None) -> Path:
    """The stand-in llama-perplexity's long-context base file (the same code it runs)."""
    scope: dict = {}
    exec(LONG_BASE, scope)  # noqa: S102 - our own code, shared with the stand-in program
    return Path(scope["write_long_base"](str(path), n_ctx, drift_from))


def gguf_header(version: int = 3, tensors: int = 1, kv: int = 0) -> bytes:
    """The fixed GGUF header: magic, version, tensor count, metadata key/value count."""
    return b"GGUF" + struct.pack("<IQQ", version, tensors, kv)


def header_model(folder: Path):
    """A file with a valid GGUF header (the stand-in programs never read it), as the smoke's ModelFile."""
    from rockbuild.smoke.models import ModelFile

    path = folder / "model.gguf"
    path.write_bytes(gguf_header() + bytes(40))
    return ModelFile("model.gguf", path, "0" * 64, 64, "path")


def fast_smoke():
    """SmokeOptions with short timeouts: a stand-in that hangs fails in seconds."""
    from rockbuild.smoke.runner import SmokeOptions

    return SmokeOptions(timeouts={"cli": 20, "server_start": 20, "request": 20, "bench": 20})
