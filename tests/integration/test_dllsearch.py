"""Windows DLL shadowing (rockbuild/dllsearch.py, doctor's and install's check), proven with wine's loader: a stand-in
amdhip64_7.dll in a bundle folder and copies of it in the wine prefix's system32, Windows folder and syswow64, in a
folder on PATH, in a program's folder and in a current folder; a probe (mingw-w64, like tests/integration/test_bundle_pe.py) loads
the bundle's ggml-hip.dll (which imports amdhip64_7.dll) and prints which amdhip64_7.dll the loader took
(GetModuleFileName). Every case asserts that rockbuild's prediction is that file.

One wine prefix serves the module (made once, about 5 s); each run of the probe takes about half a second. Needs the
Debian packages gcc-mingw-w64-x86-64 and wine64; each test says which is missing.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from pathlib import Path, PureWindowsPath

import pytest
from support.bundles import make_bundle
from support.paths import FIXTURES
from support.pe import build_pe, pe_tree, wine

from rockbuild.core.environment import WindowsHost
from rockbuild.dllsearch import (
    bundled_hip_dlls,
    is_hip_dll,
    outside_shadows,
    resolve_bundle_dlls,
    same_file,
    search_folders,
)
from rockbuild.doctor import BundleCheck, Machine, run_doctor
from rockbuild.rocm.layout import detect_layout
from rockbuild.settings import Settings

SYSFS = FIXTURES / "sysfs"
HIP = "amdhip64_7.dll"
PROBE = r"""
#include <windows.h>
#include <stdio.h>
#include <string.h>
/* probe.exe [DLL [altered]]: load DLL by its full path (LOAD_WITH_ALTERED_SEARCH_PATH with "altered"), then say
   which amdhip64_7.dll the process has. Linked against ggml-hip.dll (llama.exe), it imports it instead. */
int main(int argc, char **argv) {
    char name[4096];
    DWORD flags = argc > 2 && strcmp(argv[2], "altered") == 0 ? LOAD_WITH_ALTERED_SEARCH_PATH : 0;
    HMODULE hip;
    if (argc > 1 && !LoadLibraryExA(argv[1], NULL, flags)) {
        printf("not loaded (error %lu)\n", GetLastError());
        return 3;
    }
    hip = GetModuleHandleA("amdhip64_7.dll");
    if (!hip || !GetModuleFileNameA(hip, name, sizeof name)) {
        printf("not loaded\n");
        return 4;
    }
    printf("loaded %s\n", name);
    return 0;
}
"""


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    """The PE files, built once: a stand-in amdhip64_7.dll, ggml-hip.dll importing it, probe.exe, and llama.exe
    (the probe linked against ggml-hip.dll: an implicit import, as llama-server.exe has)."""
    base = tmp_path_factory.mktemp("parts")
    hip = build_pe(base / HIP, "__declspec(dllexport) int hip_value(void){return 42;}", dll=True)
    ggml = build_pe(
        base / "ggml-hip.dll",
        "__declspec(dllimport) int hip_value(void);\n__declspec(dllexport) int ggml_value(void){return hip_value();}",
        dll=True,
        imports=(hip,),
    )
    probe = build_pe(base / "probe.exe", PROBE, dll=False)
    llama = build_pe(
        base / "llama.exe",
        PROBE + "__declspec(dllimport) int ggml_value(void);\nint (*keep)(void) = ggml_value;\n",
        dll=False,
        imports=(ggml,),
    )
    return {"hip": hip, "ggml": ggml, "probe": probe, "llama": llama}


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    """One wine prefix for the module (wineboot once); its wineserver is stopped at the end."""
    runner = wine()
    base = tmp_path_factory.mktemp("wine")
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(base),
        "WINEPREFIX": str(base / "prefix"),
        "WINEDEBUG": "-all",
        "WINEDLLOVERRIDES": "mscoree,mshtml=",
    }
    server = Path(runner).with_name("wineserver")
    server = server if server.exists() else Path(shutil.which("wineserver") or server)
    quiet = {
        "env": env,
        "stdin": subprocess.DEVNULL,
        "stdout": subprocess.DEVNULL,
        "stderr": subprocess.DEVNULL,
        "timeout": 300,
    }  # no pipes: a wineserver started here outlives the call and would hold them open
    (base / "prefix").mkdir()
    try:
        # a wineserver that stays up for the module (started before anything else uses the prefix): each run then
        # starts in a fraction of a second, not in seconds
        subprocess.run([str(server), "-p"], check=True, **quiet)
        subprocess.run([runner, "wineboot", "--init"], check=True, **quiet)
        windows = base / "prefix" / "drive_c" / "windows"
        assert (windows / "system32").is_dir(), "wineboot made no prefix"
        yield {"runner": runner, "env": env, "windows": windows, "drive_c": base / "prefix" / "drive_c"}
    finally:
        subprocess.run([str(server), "-k"], **quiet)


@contextlib.contextmanager
def placed(files: dict[Path, Path]):
    """Copy each source to its target for the duration (the prefix is shared: nothing may stay in it)."""
    try:
        for target, source in files.items():
            shutil.copyfile(source, target)
        yield
    finally:
        for target in files:
            with contextlib.suppress(FileNotFoundError):
                target.unlink()


def win_path(path: Path) -> str:
    """A host path as wine's programs see it (drive Z: is /)."""
    return "Z:" + str(PureWindowsPath(path))


def host_path(prefix, name: str) -> Path:
    """A path wine printed, back on the host (C: is the prefix's drive_c, Z: is /), matched case-insensitively."""
    drive, *parts = PureWindowsPath(name).parts
    here = prefix["drive_c"] if drive.upper().startswith("C:") else Path("/")
    for part in parts:
        here = next((p for p in here.iterdir() if p.name.lower() == part.lower()), here / part)
    return here


def run_probe(prefix, exe: Path, *args: str, cwd: Path, path: list[Path]) -> Path | None:
    """Run ``exe`` under wine with ``path`` first on its PATH (WINEPATH); the amdhip64_7.dll it loaded, or None."""
    env = {**prefix["env"], "WINEPATH": ";".join(win_path(p) for p in path)}
    result = subprocess.run(
        [prefix["runner"], str(exe), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )
    out = result.stdout.replace("\r", "").strip()
    assert out.startswith(("loaded ", "not loaded")), (out, result.stderr[-2000:])
    return host_path(prefix, out.removeprefix("loaded ")) if out.startswith("loaded ") else None


def predicted_host(prefix, path: list[Path]) -> WindowsHost:
    """The Windows environment the probe gets: WINEPATH, then wine's default PATH (system32, the Windows folder)."""
    windows = prefix["windows"]
    return WindowsHost(windows, (*path, windows / "system32", windows))


def layout(tmp_path: Path, parts) -> dict[str, Path]:
    """bundle/ (amdhip64_7.dll, ggml-hip.dll, probe.exe, llama.exe), host/ (probe.exe: a program outside the bundle),
    stale/ and here/ (a stale amdhip64_7.dll each: one for PATH, one for a current folder), empty/."""
    dirs = {name: tmp_path / name for name in ("bundle", "host", "stale", "here", "empty")}
    for d in dirs.values():
        d.mkdir()
    for name in (HIP, "ggml-hip.dll", "probe.exe", "llama.exe"):
        shutil.copyfile(
            parts[{"ggml-hip.dll": "ggml", "probe.exe": "probe", "llama.exe": "llama"}.get(name, "hip")],
            dirs["bundle"] / name,
        )
    shutil.copyfile(parts["probe"], dirs["host"] / "probe.exe")
    shutil.copyfile(parts["hip"], dirs["stale"] / HIP)
    shutil.copyfile(parts["hip"], dirs["here"] / HIP)
    return dirs


# (start, copies placed, PATH (WINEPATH) order, current folder) -> the amdhip64_7.dll wine's loader took
#   start: import = bundle/llama.exe imports ggml-hip.dll; load = bundle/probe.exe loads bundle/ggml-hip.dll by path;
#          host = host/probe.exe loads bundle/ggml-hip.dll by path; altered = the same with LOAD_WITH_ALTERED_SEARCH_PATH
CASES = {
    # a program of the bundle: its folder (the application folder) comes first, before System32 and PATH
    "bundle program imports, System32 copy": ("import", ["system32"], ["stale"], "empty", "bundle"),
    "bundle program loads by path, System32 copy": ("load", ["system32", "windows"], ["stale"], "here", "bundle"),
    # a program outside the bundle: System32 beats the bundle first on PATH and the bundle as current folder
    "outside, System32 copy, bundle first on PATH": ("host", ["system32"], ["bundle"], "empty", "system32"),
    "outside, System32 copy, bundle as current folder": ("host", ["system32"], [], "bundle", "system32"),
    "outside, System32 copy named in capitals": ("host", ["SYSTEM32"], ["bundle"], "bundle", "SYSTEM32"),
    "outside, Windows folder copy beats the current folder": ("host", ["windows"], [], "bundle", "windows"),
    "outside, stale PATH entry before the bundle": ("host", [], ["stale", "bundle"], "empty", "stale"),
    "outside, bundle before the stale PATH entry": ("host", [], ["bundle", "stale"], "empty", "bundle"),
    "outside, current folder beats PATH": ("host", [], ["bundle"], "here", "here"),
    "outside, its own folder comes first": ("host", ["own"], ["bundle"], "bundle", "host"),
    "outside, SysWOW64 is not searched by a 64-bit program": ("host", ["syswow64"], [], "empty", None),
    "outside, the bundle nowhere on its search path": ("host", [], [], "empty", None),
    "outside with LOAD_WITH_ALTERED_SEARCH_PATH, System32 copy": (
        "altered",
        ["system32", "own"],
        ["stale"],
        "here",
        "bundle",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_prediction_is_what_wines_loader_does(case, parts, prefix, tmp_path):
    start, copies, path_order, cwd_name, expected = CASES[case]
    dirs = layout(tmp_path, parts)
    windows = prefix["windows"]
    targets = {
        "system32": windows / "system32" / HIP,
        "SYSTEM32": windows / "system32" / HIP.upper(),
        "windows": windows / HIP,
        "syswow64": windows / "syswow64" / HIP,
        "own": dirs["host"] / HIP,
    }
    (windows / "syswow64").mkdir(exist_ok=True)  # a 64-bit Windows has one; a fresh wine prefix may not yet
    path = [dirs[p] for p in path_order]
    cwd = dirs[cwd_name]
    bundle = dirs["bundle"]
    ggml = bundle / "ggml-hip.dll"
    host = predicted_host(prefix, path)
    with placed({targets[c]: parts["hip"] for c in copies}):
        if start in ("import", "load"):
            (predicted,) = resolve_bundle_dlls(bundle, host, cwd=cwd)
        else:
            (predicted,) = resolve_bundle_dlls(
                bundle, host, loader=dirs["host"] / "probe.exe", loads=ggml, cwd=cwd, altered=start == "altered"
            )
        if start == "import":
            loaded = run_probe(prefix, bundle / "llama.exe", cwd=cwd, path=path)
        elif start == "load":
            loaded = run_probe(prefix, bundle / "probe.exe", win_path(ggml), cwd=cwd, path=path)
        else:
            loaded = run_probe(
                prefix,
                dirs["host"] / "probe.exe",
                win_path(ggml),
                *(["altered"] if start == "altered" else []),
                cwd=cwd,
                path=path,
            )
    where = {
        "system32": windows / "system32" / HIP,
        "SYSTEM32": windows / "system32" / HIP.upper(),
        "windows": windows / HIP,
        "host": dirs["host"] / HIP,
        **{name: dirs[name] / HIP for name in ("bundle", "stale", "here")},
    }
    if expected is None:
        assert loaded is None and predicted.missing and not predicted.shadowed
        assert predicted.fix.startswith(f"put {bundle} on PATH")
        return
    assert loaded is not None and same_file(loaded, where[expected]), (case, loaded)  # what wine did
    assert predicted.loaded is not None and same_file(predicted.loaded, loaded), (case, predicted)  # our prediction
    assert predicted.shadowed == (expected != "bundle")
    assert bool(predicted.fix) == predicted.shadowed


def test_search_order_names_each_folder():
    host = WindowsHost(Path("/w"), (Path("/p1"), Path("/p2")))
    assert [k for k, _ in search_folders(host, app_folder=Path("/app"), cwd=Path("/cwd"))] == [
        "application folder",
        "System32",
        "16-bit system folder",
        "Windows folder",
        "current folder",
        "PATH",
        "PATH",
    ]
    assert [k for k, _ in search_folders(host, app_folder=None, cwd=None)] == [
        "System32",
        "16-bit system folder",
        "Windows folder",
        "PATH",
        "PATH",
    ]


def test_windows_environment_from_settings():
    """Only settings.py reads os.environ: a Windows environment (names in any case) becomes Settings.windows."""
    env = {"SystemRoot": "D:\\Win", "Path": 'C:\\a;;"C:\\Program Files\\b";C:\\c'}
    settings = Settings.from_environment(env, host_os="windows")
    assert settings.windows == WindowsHost(
        Path("D:\\Win"), (Path("C:\\a"), Path("C:\\Program Files\\b"), Path("C:\\c"))
    )
    assert WindowsHost.from_environment({"WINDIR": "E:\\W"}).system_root == Path("E:\\W")
    assert WindowsHost.from_environment({}).system_root == Path("C:\\Windows")
    assert Settings.from_environment(env, host_os="linux").windows is None  # Linux hosts: no Windows check


def test_hip_dll_names_case_insensitively(tmp_path):
    for name in (
        "AMDHIP64_7.DLL",
        "amd_comgr0702.dll",
        "hiprtc0702.dll",
        "ggml-hip.dll",
        "rocblas.dll",
        "amdhip64_7.dll.bak",
    ):
        (tmp_path / name).write_bytes(b"MZ")
    assert [p.name for p in bundled_hip_dlls(tmp_path)] == ["amd_comgr0702.dll", "AMDHIP64_7.DLL", "hiprtc0702.dll"]
    assert not is_hip_dll("ggml-hip.dll") and is_hip_dll("Amd_Comgr_2.dll")
    system32 = tmp_path / "win" / "System32"
    system32.mkdir(parents=True)
    (system32 / "hiprtc0702.DLL").write_bytes(b"MZ")
    (system32 / "amdhip64_6.dll").write_bytes(b"MZ")  # another name: shadows nothing
    (shadow,) = outside_shadows(tmp_path, WindowsHost(tmp_path / "win"))
    assert (shadow.name, shadow.loaded, shadow.where) == ("hiprtc0702.dll", system32 / "hiprtc0702.DLL", "System32")


# ---------------------------------------------------------------------------------------------------------------------
# doctor and install on a real Windows bundle (support.pe's tree, bundled by make_bundle)


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """The PE tree (support.pe.pe_tree), made once for the module."""
    return pe_tree(tmp_path_factory.mktemp("pe"))


@pytest.fixture(scope="module")
def win_bundle(tree, tmp_path_factory):
    out = tmp_path_factory.mktemp("winbundle") / "llama"
    report = make_bundle(tree["build"], detect_layout(tree["rocm"]), ["gfx1151"], out)
    assert report.audit.ok, report.audit.failures
    return out


def doctor_cli(run_rockbuild, bundle: Path, prefix, *extra: str, cwd: Path):
    sys_root, proc_root = SYSFS / "strix-halo" / "sys", SYSFS / "strix-halo" / "proc"
    dev = cwd.parent / "dev"
    if not dev.exists():
        (dev / "dri").mkdir(parents=True)
        for node in (dev / "kfd", dev / "dri" / "renderD128"):
            node.write_bytes(b"")
            node.chmod(0o666)
    return run_rockbuild(
        "doctor",
        "--bundle",
        str(bundle),
        "--sysfs-root",
        str(sys_root),
        "--dev-root",
        str(dev),
        "--proc-root",
        str(proc_root),
        "--windows-root",
        str(prefix["windows"]),
        *extra,
        cwd=cwd,
    )


def test_doctor_fails_for_a_program_outside_the_bundle_that_wine_shows_gets_system32s_copy(
    win_bundle, parts, prefix, run_rockbuild, tmp_path
):
    """The done-when of issue 20 item 4: with System32\\amdhip64_7.dll present, ``doctor --loader`` fails naming the
    file and the fix, and wine's loader really gives that program System32's copy; without it doctor passes."""
    host = tmp_path / "host"
    host.mkdir()
    shutil.copyfile(parts["probe"], host / "probe.exe")
    system32 = prefix["windows"] / "system32" / HIP
    with placed({system32: parts["hip"]}):
        loaded = run_probe(prefix, host / "probe.exe", win_path(win_bundle / "ggml-hip.dll"), cwd=win_bundle, path=[])
        failed = doctor_cli(run_rockbuild, win_bundle, prefix, "--loader", str(host / "probe.exe"), cwd=win_bundle)
        as_json = doctor_cli(
            run_rockbuild, win_bundle, prefix, "--loader", str(host / "probe.exe"), "--json", cwd=win_bundle
        )
        own = doctor_cli(run_rockbuild, win_bundle, prefix, "--json", cwd=win_bundle)
    assert loaded is not None and same_file(loaded, system32)  # wine: the driver's copy, not the bundle's
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert failed.stderr.splitlines() == ["error: 1 problem found (dll): the finding marked error says what to do"]
    assert (
        f"  [error] {system32} (System32) shadows the bundle's {win_bundle / HIP} for {host / 'probe.exe'} "
        "loading ggml-hip.dll: llama.cpp would run on another HIP runtime and crash"
    ) in failed.stdout.splitlines()
    assert (
        "      -> start the bundle's own program (e.g. llama-server.exe: its folder is searched before the system "
        f"folders), or have {host / 'probe.exe'} load ggml-hip.dll with LoadLibraryEx(..., "
        "LOAD_WITH_ALTERED_SEARCH_PATH); moving the bundle up PATH cannot help"
    ) in failed.stdout.splitlines()
    (error,) = [f for f in json.loads(as_json.stdout)["findings"] if f["severity"] == "error"]
    assert as_json.stderr.splitlines() == failed.stderr.splitlines()  # one wording, with --json or without
    # the bundle's own programs are not affected: doctor passes and says why, naming the copy as information
    assert own.returncode == 0, own.stdout + own.stderr
    dll = [f for f in json.loads(own.stdout)["findings"] if f["topic"] == "dll"]
    assert [(f["severity"], f["message"]) for f in dll] == [
        ("ok", f"the programs in {win_bundle} load its own amd_comgr0702.dll, {HIP} (their folder is searched first)"),
        (
            "info",
            f"{system32} (System32) would shadow the bundle's {HIP} for a program outside the bundle that loads "
            "its DLLs (a wrapper, a game engine); the bundle's own programs are not affected",
        ),
    ]
    # without the copy the same program gets the bundle's amdhip64_7.dll (its current folder): doctor passes
    loaded = run_probe(prefix, host / "probe.exe", win_path(win_bundle / "ggml-hip.dll"), cwd=win_bundle, path=[])
    clean = doctor_cli(run_rockbuild, win_bundle, prefix, "--loader", str(host / "probe.exe"), "--json", cwd=win_bundle)
    assert loaded is not None and same_file(loaded, win_bundle / HIP)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert [f["message"] for f in json.loads(clean.stdout)["findings"] if f["topic"] == "dll"] == [
        f"{host / 'probe.exe'} loads the bundle's own amd_comgr0702.dll, {HIP} (current folder)"
    ]


def test_doctor_names_a_stale_path_entry_ahead_of_the_bundle(win_bundle, parts, tmp_path):
    """PATH from a Windows environment, through Settings: the stale folder before the bundle is the error."""
    stale = tmp_path / "hip-sdk" / "bin"
    stale.mkdir(parents=True)
    shutil.copyfile(parts["hip"], stale / HIP)
    root = tmp_path / "Windows"
    (root / "System32").mkdir(parents=True)
    settings = Settings.from_environment({"SystemRoot": str(root), "PATH": f"{stale};{win_bundle}"}, host_os="windows")
    loader = tmp_path / "python.exe"
    loader.write_bytes(b"MZ")
    sys_root, proc_root = SYSFS / "strix-halo" / "sys", SYSFS / "strix-halo" / "proc"
    dev = tmp_path / "dev"
    (dev / "dri").mkdir(parents=True)
    for node in (dev / "kfd", dev / "dri" / "renderD128"):
        node.write_bytes(b"")

    def host(windows):
        return Machine(sysfs_root=sys_root, proc_root=proc_root, dev_root=dev, env={}, kernel="t", windows=windows)

    check = BundleCheck(win_bundle, loader=loader, cwd=tmp_path)
    report = run_doctor(host(settings.windows), bundle=check)
    (error,) = report.errors
    assert error.message.startswith(f"{stale / HIP} (PATH) shadows the bundle's {win_bundle / HIP} for {loader}")
    assert error.action == f"put {win_bundle} before {stale} on PATH, or take {stale} off PATH"
    swapped = Settings.from_environment({"SystemRoot": str(root), "PATH": f"{win_bundle};{stale}"}, host_os="windows")
    assert run_doctor(host(swapped.windows), bundle=check).ok
    # on Linux (no Windows environment) the check does nothing
    linux = run_doctor(host(None), bundle=BundleCheck(win_bundle))
    assert linux.ok and not [f for f in linux.findings if f.topic == "dll"]


def test_loader_needs_a_bundle_on_windows(run_rockbuild, tmp_path):
    exe = tmp_path / "python.exe"
    exe.write_bytes(b"MZ")
    result = run_rockbuild("doctor", "--loader", str(exe), "--sysfs-root", str(SYSFS / "strix-halo" / "sys"))
    assert result.returncode == 2
    assert result.stderr.splitlines()[0] == (
        "error: --loader checks which DLLs a Windows program loads from a bundle: it needs --bundle, on Windows"
    )
