"""glslc's outputs kept across build trees: what ccache is for the C++ compiler, for the Vulkan shaders.

Used by the build stage of a Vulkan job (Linux): :func:`install_wrapper` (called by :mod:`rockbuild.backends.vulkan`)
writes ``<build>/rockbuild-glslc``, which CMake is given as ``Vulkan_GLSLC_EXECUTABLE`` and which runs :func:`main`
for each of the ~1,100 glslc compiles of a build: a compile found again (by glslc's identity, its arguments and the
content of its source and includes) is written byte for byte, a miss runs glslc. :func:`disabled` and :func:`size_mib`
read the switch and the bound; :func:`log_counts` gives build.json's counts. Standard library only: the wrapper
imports this module with ``python -IS`` on every compile.

docs/vulkan.md ("Warm shaders") explains the keys, the folder's layout, its size and how to turn it off."""

from __future__ import annotations

import hashlib
import marshal
import os
import sys

TYPE_CHECKING = False  # typing's own costs an import in each of the ~1,100 wrapper starts of a build

if TYPE_CHECKING:
    from collections.abc import Mapping

VERSION = "rockbuild-glslc-cache 1"
WRAPPER_NAME = "rockbuild-glslc"
SHADER_CACHE_FOLDER = "glslc"  # in the ccache folder (ccache itself reads and cleans only its 0-f subfolders)
DEFAULT_SIZE_MIB = 1024
SIZE_VARIABLE = "ROCKBUILD_SHADER_CACHE_SIZE"
SWITCH_VARIABLE = "ROCKBUILD_SHADER_CACHE"  # 0 / off / no / false: no shader cache (as --no-ccache)
LOG_NAME = "rockbuild-glslc.log"  # one line per compile in the build folder: hit / miss / uncached

# flags of a compile the cache understands; anything else runs glslc as it is
_FLAG_OPTIONS = {"-O", "-O0", "-Os", "-g", "-w", "-Werror", "-c", "-MD", "-M", "-MM"}
_PREFIX_OPTIONS = ("-fshader-stage=", "--target-env=", "--target-spv=", "-std=", "-D", "-I", "-U")
_MANIFEST_ENTRIES = 8


def disabled(env: Mapping[str, str]) -> bool:
    """``ROCKBUILD_SHADER_CACHE`` set to 0, off, no or false."""
    return env.get(SWITCH_VARIABLE, "").strip().lower() in {"0", "off", "no", "false"}


def size_mib(env: Mapping[str, str]) -> int:
    """The bound of the folder: ``ROCKBUILD_SHADER_CACHE_SIZE`` MiB, else 1024."""
    try:
        return max(1, int(env.get(SIZE_VARIABLE) or DEFAULT_SIZE_MIB))
    except ValueError:
        return DEFAULT_SIZE_MIB


# ---------------------------------------------------------------------------------------------------------------------
# The compiler's identity, computed when the wrapper is written


def _sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _stat_key(path: str) -> list[int]:
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def glslc_identity(glslc: str) -> str:
    """sha256 of glslc's ``--version``, its bytes and those of the shader compiler libraries it loads (ldd)."""
    import subprocess

    h = hashlib.sha256(VERSION.encode())
    version = subprocess.run([glslc, "--version"], capture_output=True, timeout=60)
    h.update(version.stdout + version.stderr)
    h.update(_sha256_file(glslc).encode())
    try:
        ldd = subprocess.run(["ldd", glslc], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        ldd = ""
    for line in ldd.splitlines():
        name, _, rest = line.strip().partition(" => ")
        lib = rest.split(" (")[0].strip()
        if lib.startswith("/") and any(k in name.lower() for k in ("shaderc", "glslang", "spirv")):
            h.update(f"{name}\0{_sha256_file(lib)}\n".encode())
    return h.hexdigest()


def install_wrapper(
    build_dir: os.PathLike[str] | str,
    glslc: str,
    cache_dir: os.PathLike[str] | str,
    *,
    size: int = DEFAULT_SIZE_MIB,
    python: str | None = None,
) -> str:
    """Write ``<build_dir>/rockbuild-glslc``, the glslc CMake is given (rewritten only when its text changes, so a
    configured tree does not see a new compiler); returns its path. Everything the wrapper needs is written into it
    (the folder's bound ``size`` in MiB too): it reads no environment, and costs one Python start per glslc run."""
    glslc = os.path.realpath(glslc)
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    config = {
        "glslc": glslc,
        "stat": _stat_key(glslc),
        "identity": glslc_identity(glslc),
        "cache": os.path.abspath(cache_dir),
        "log": os.path.join(os.path.abspath(build_dir), LOG_NAME),
        "size_mib": size,
    }
    text = (
        f"#!{python or sys.executable} -IS\n"
        "# glslc through rockbuild's shader cache (rockbuild/llamacpp/shader_cache.py); written by rockbuild\n"
        "import sys\n"
        f"sys.path.insert(0, {package_root!r})\n"
        "from rockbuild.llamacpp.shader_cache import main\n"
        f"sys.exit(main(sys.argv[1:], {config!r}))\n"
    )
    os.makedirs(build_dir, exist_ok=True)
    path = os.path.join(os.path.abspath(build_dir), WRAPPER_NAME)
    try:
        with open(path, encoding="utf-8") as f:
            same = f.read() == text
    except OSError:
        same = False
    if not same:
        _write_atomic(path, text.encode(), mode=0o755)
    return path


# ---------------------------------------------------------------------------------------------------------------------
# Files


def _write_atomic(path: str, data: bytes, *, mode: int = 0o644, tmp_dir: str | None = None) -> None:
    folder = tmp_dir or os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.{os.urandom(4).hex()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


# The folder's own formats: marshal (a module built into Python: json and the re it imports cost a tenth of each
# wrapper start), keys from repr() of strings and lists; _FORMAT is in every key and header, so that a folder written
# by another format (json before 2026-12-06) is all misses, never misread. Python's own marshal version may change
# between Pythons: an entry it cannot read is damaged, which is a miss.
_FORMAT = 2
_MARSHAL = 4
_DAMAGED = (ValueError, EOFError, TypeError, KeyError, AttributeError, IndexError)


class Cache:
    """The folder: manifests (m/), results (r/), temporary files (tmp/)."""

    def __init__(self, root: str, size_mib: int = DEFAULT_SIZE_MIB) -> None:
        self.root = root
        self.limit = size_mib * 1024 * 1024
        self.tmp = os.path.join(root, "tmp")

    def _path(self, kind: str, key: str) -> str:
        return os.path.join(self.root, kind, key[:2], key)

    def manifest(self, key: str) -> list[dict]:
        data = _read(self._path("m", key))
        try:
            entries = marshal.loads(data)["entries"] if data else []
            return [e for e in entries if isinstance(e.get("deps"), list) and isinstance(e.get("result"), str)]
        except _DAMAGED:
            return []

    def add_to_manifest(self, key: str, entry: dict) -> None:
        entries = [e for e in self.manifest(key) if e["result"] != entry["result"]]
        data = marshal.dumps({"entries": [entry, *entries][:_MANIFEST_ENTRIES]}, _MARSHAL)
        _write_atomic(self._path("m", key), data, tmp_dir=self.tmp)

    def result(self, key: str) -> tuple[dict, bytes] | None:
        """A stored result, or None when it is absent or does not hold together (then it is deleted)."""
        path = self._path("r", key)
        data = _read(path)
        if data is None:
            return None
        try:
            size = int.from_bytes(data[:4], "big")
            header, spv = marshal.loads(data[4 : 4 + size]), data[4 + size :]
            if header.get("v") != _FORMAT or hashlib.sha256(spv).hexdigest() != header["spv_sha256"]:
                raise ValueError("checksum")
            for name in ("stdout", "stderr", "depfile"):
                if not isinstance(header.get(name), str):
                    raise ValueError(name)
        except _DAMAGED:
            _unlink(path)
            return None
        _touch(path)  # least recently used goes first
        return header, spv

    def store(self, key: str, header: dict, spv: bytes) -> None:
        head = marshal.dumps({"v": _FORMAT, "spv_sha256": hashlib.sha256(spv).hexdigest(), **header}, _MARSHAL)
        _write_atomic(self._path("r", key), len(head).to_bytes(4, "big") + head + spv, tmp_dir=self.tmp)
        if key[0] == "0":  # about one store in 16
            self.trim()

    def trim(self) -> int:
        """Delete the least recently used files until the folder is under 80 % of its bound; returns bytes freed.
        Left-over temporary files older than an hour go too."""
        import time

        files: list[tuple[float, int, str]] = []
        total = 0
        now = time.time()
        for kind in ("m", "r", "tmp"):
            for folder, _dirs, names in os.walk(os.path.join(self.root, kind)):
                for name in names:
                    path = os.path.join(folder, name)
                    try:
                        st = os.stat(path)
                    except OSError:
                        continue
                    if kind == "tmp":
                        if now - st.st_mtime > 3600:
                            _unlink(path)
                        continue
                    files.append((st.st_mtime, st.st_size, path))
                    total += st.st_size
        freed = 0
        if total > self.limit:
            for _mtime, size, path in sorted(files):
                if total - freed <= self.limit * 0.8:
                    break
                if _unlink(path):
                    freed += size
        return freed


def _touch(path: str) -> bool:
    try:
        os.utime(path)
        return True
    except OSError:
        return False


def _unlink(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except OSError:
        return False


# ---------------------------------------------------------------------------------------------------------------------
# One glslc command


class Compile:
    """``glslc [flags] IN -o OUT [-MD] [-MF DEP]``, or None from :meth:`parse` when it is anything else."""

    def __init__(self, flags: list[str], source: str, output: str, depfile: str | None) -> None:
        self.flags, self.source, self.output, self.depfile = flags, source, output, depfile

    @classmethod
    def parse(cls, args: list[str]) -> Compile | None:
        flags: list[str] = []
        sources: list[str] = []
        output = depfile = None
        md = False
        i = 0
        while i < len(args):
            arg = args[i]
            if arg in ("-o", "-MF"):
                if i + 1 >= len(args):
                    return None
                if arg == "-o":
                    output = args[i + 1]
                else:
                    depfile = args[i + 1]
                i += 2
                continue
            if arg == "-MD":
                md = True
            elif arg in ("-I", "-D", "-U"):  # the value in the next argument
                if i + 1 >= len(args):
                    return None
                flags += [arg, args[i + 1]]
                i += 2
                continue
            elif arg in _FLAG_OPTIONS:
                if arg in ("-M", "-MM", "-c"):  # dependencies only, or object files: not a compile we cache
                    return None
                flags.append(arg)
            elif arg.startswith(_PREFIX_OPTIONS):
                flags.append(arg)
            elif arg.startswith("-"):
                return None
            else:
                sources.append(arg)
            i += 1
        if len(sources) != 1 or not output or output == "-" or (depfile is not None and not md):
            return None
        return cls(flags, sources[0], output, depfile if md else None)

    def key(self, identity: str, source_bytes: bytes) -> str:
        h = hashlib.sha256(f"{identity}\0".encode())
        located = "-g" in self.flags or not os.path.isabs(self.source)  # debug info holds the path
        h.update(
            repr(
                [
                    _FORMAT,
                    self.flags,
                    os.path.basename(self.source),
                    self.source if located else None,
                    os.getcwd() if not os.path.isabs(self.source) else None,
                ]
            ).encode()
        )
        h.update(b"\0" + hashlib.sha256(source_bytes).digest())
        return h.hexdigest()

    @property
    def source_dir(self) -> str:
        return os.path.dirname(self.source)


# The depfile glslc writes: "OUT: IN DEP1 DEP2 ...\n", each path as glslc saw it (no escaping of spaces). The cache
# keeps it as a template: OUT as "\0o", the folder of IN (as given) as "\0d".


def depfile_template(text: str, compile: Compile) -> tuple[str, list[str]] | None:
    """(template, the included files as absolute paths) of glslc's depfile text, or None when it cannot be read."""
    prefix = f"{compile.output}: {compile.source}"
    if not text.startswith(prefix) or not text.endswith("\n") or text.count("\n") != 1:
        return None
    rest = text[len(prefix) : -1]
    deps: list[str] = []
    word = ""
    for token in rest.split(" ")[1:] if rest else []:  # rest starts with " " when there are includes
        word = f"{word} {token}" if word else token
        if os.path.isfile(word):  # a path with spaces is joined until it names a file
            deps.append(word)
            word = ""
    if word or (rest and not rest.startswith(" ")):
        return None
    folder = compile.source_dir

    def templ(path: str) -> str:
        if folder and path.startswith(folder + os.sep):
            return "\0d" + path[len(folder) :]
        return path

    template = "\0o: " + templ(compile.source) + "".join(" " + templ(d) for d in deps) + "\n"
    return template, [os.path.abspath(d) for d in deps]


def render_depfile(template: str, compile: Compile) -> str:
    return template.replace("\0o", compile.output).replace("\0d", compile.source_dir)


def _dep_name(path: str, compile: Compile) -> str:
    """An included file as the manifest names it: relative to IN's folder when inside it."""
    folder = os.path.abspath(compile.source_dir)
    return path[len(folder) + 1 :] if path.startswith(folder + os.sep) else path


def _dep_path(name: str, compile: Compile) -> str:
    return name if os.path.isabs(name) else os.path.join(os.path.abspath(compile.source_dir), name)


class _Hashes:
    def __init__(self) -> None:
        self.known: dict[str, str | None] = {}

    def __call__(self, path: str) -> str | None:
        if path not in self.known:
            data = _read(path)
            self.known[path] = hashlib.sha256(data).hexdigest() if data is not None else None
        return self.known[path]


def _log(config: dict, what: str, compile: Compile | None) -> None:
    log = config.get("log")
    if not log:
        return
    try:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{what} {compile.source if compile else '-'}\n".encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def _exec(glslc: str, args: list[str]) -> int:
    sys.stdout.flush()
    os.execv(glslc, [glslc, *args])
    return 127  # not reached


def _emit(stdout: str, stderr: str) -> None:
    if stdout:
        sys.stdout.buffer.write(stdout.encode("utf-8", "surrogateescape"))
        sys.stdout.flush()
    if stderr:
        sys.stderr.buffer.write(stderr.encode("utf-8", "surrogateescape"))
        sys.stderr.flush()


def main(args: list[str], config: dict) -> int:
    """The wrapper: glslc ``args`` through the cache ``config`` (glslc, stat, identity, cache, log)."""
    glslc = config["glslc"]
    compile = Compile.parse(args)
    if compile is None:
        return _exec(glslc, args)
    try:
        if _stat_key(glslc) != config["stat"]:  # glslc changed since the wrapper was written: its identity is stale
            _log(config, "uncached", compile)
            return _exec(glslc, args)
        source_bytes = _read(compile.source)
        if source_bytes is None:
            return _exec(glslc, args)  # glslc says why
        cache = Cache(config["cache"], config.get("size_mib", DEFAULT_SIZE_MIB))
        key = compile.key(config["identity"], source_bytes)
    except OSError:
        return _exec(glslc, args)  # a cache we cannot use is no cache, never a failed build
    hashes = _Hashes()
    found = _lookup(cache, key, compile, hashes)
    if found is None:
        return _miss(compile, args, config, cache, key, hashes)
    header, spv = found
    with open(compile.output, "wb") as f:
        f.write(spv)
    if compile.depfile is not None:
        with open(compile.depfile, "w", encoding="utf-8", newline="") as f:
            f.write(render_depfile(header["depfile"], compile))
    _emit(header["stdout"], header["stderr"])
    _log(config, "hit", compile)
    return 0


def _lookup(cache: Cache, key: str, compile: Compile, hashes: _Hashes) -> tuple[dict, bytes] | None:
    """The result of the first manifest entry whose included files have the content they have now; a manifest or
    result that does not hold together is a miss."""
    try:
        for entry in cache.manifest(key):
            if all(hashes(_dep_path(name, compile)) == digest for name, digest in entry["deps"]):
                found = cache.result(entry["result"])
                if found is not None:
                    return found
    except (OSError, ValueError, TypeError):
        pass
    return None


def _miss(compile: Compile, args: list[str], config: dict, cache: Cache, key: str, hashes: _Hashes) -> int:
    import subprocess

    os.makedirs(cache.tmp, exist_ok=True)
    dep_tmp = os.path.join(cache.tmp, f"dep.{os.getpid()}.{os.urandom(4).hex()}")
    run_args: list[str] = []
    i = 0
    while i < len(args):  # the caller's -MD/-MF become ours: the includes are always wanted
        if args[i] == "-MF":
            i += 2
            continue
        if args[i] != "-MD":
            run_args.append(args[i])
        i += 1
    run_args += ["-MD", "-MF", dep_tmp]
    try:
        done = subprocess.run([config["glslc"], *run_args], capture_output=True)
        stdout = done.stdout.decode("utf-8", "surrogateescape")
        stderr = done.stderr.decode("utf-8", "surrogateescape")
        dep_text = _read(dep_tmp)
    finally:
        _unlink(dep_tmp)
    parsed = None
    if done.returncode == 0 and dep_text is not None:
        parsed = depfile_template(dep_text.decode("utf-8", "surrogateescape"), compile)
        if compile.depfile is not None:
            with open(compile.depfile, "wb") as f:
                f.write(dep_text)
    _emit(stdout, stderr)
    if done.returncode != 0:
        return done.returncode
    if parsed is None:
        _log(config, "uncached", compile)
        return 0
    template, deps = parsed
    try:
        spv = _read(compile.output)
        digests = [
            (_dep_name(d, compile), hashes(d)) for d in deps if os.path.abspath(d) != os.path.abspath(compile.source)
        ]
        if spv is None or any(digest is None for _, digest in digests):
            _log(config, "uncached", compile)
            return 0
        result = hashlib.sha256(repr([key, digests]).encode()).hexdigest()
        cache.store(result, {"stdout": stdout, "stderr": stderr, "depfile": template}, spv)
        cache.add_to_manifest(key, {"deps": digests, "result": result})
        _log(config, "miss", compile)
    except OSError:
        _log(config, "uncached", compile)  # a full disk loses the entry, not the build
    return 0


# ---------------------------------------------------------------------------------------------------------------------
# What a build records (build.json's shader_cache): the wrapper's log lines written during its compile step


def log_offset(build_dir: os.PathLike[str] | str) -> int:
    try:
        return os.path.getsize(os.path.join(build_dir, LOG_NAME))
    except OSError:
        return 0


def log_counts(build_dir: os.PathLike[str] | str, offset: int = 0) -> dict[str, int]:
    """{hits, misses, uncached}: the glslc compiles since ``offset`` of the build folder's log."""
    counts = {"hits": 0, "misses": 0, "uncached": 0}
    names = {"hit": "hits", "miss": "misses", "uncached": "uncached"}
    try:
        with open(os.path.join(build_dir, LOG_NAME), "rb") as f:
            f.seek(offset)
            for line in f:
                what = names.get(line.split(b" ", 1)[0].decode("ascii", "replace"))
                if what:
                    counts[what] += 1
    except OSError:
        pass
    return counts
