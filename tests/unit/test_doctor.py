"""rockbuild doctor on synthetic machines: KFD topology trees in the kernel's format (tests/fixtures/sysfs/), device
folders made here, the environment passed in; the CLI runs as a real subprocess (as user nobody for the permission
test when the suite runs as root, since root may open anything)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from conftest import rockbuild_exe
from support.bundles import cc
from support.paths import FIXTURES

from rockbuild.core.jobs import load_families
from rockbuild.core.vocabulary import Gpu
from rockbuild.doctor import BundleCheck, Machine, gfx_from_override, recommend_flavours, run_doctor
from rockbuild.gpu import gfx_name, read_kfd_gpus

FIXTURES = FIXTURES / "sysfs"


def machine(name: str) -> tuple[Path, Path]:
    return FIXTURES / name / "sys", FIXTURES / name / "proc"


def dev_root(base: Path, minors=(128,), mode: int = 0o660) -> Path:
    """A /dev stand-in: kfd and dri/renderD<minor>, regular files with ``mode`` (os.access treats them alike)."""
    root = base / "dev"
    (root / "dri").mkdir(parents=True)
    for path in [root / "kfd", *(root / "dri" / f"renderD{m}" for m in minors)]:
        path.write_bytes(b"")
        path.chmod(mode)
    return root


def doctor(name: str, tmp_path: Path, *, env=None, minors=(128,), dev: Path | None = None, bundle: Path | None = None):
    sys_root, proc_root = machine(name)
    host = Machine(
        sysfs_root=sys_root,
        dev_root=dev or dev_root(tmp_path, minors),
        proc_root=proc_root,
        env=env or {},
        kernel="6.16.0-test",
    )
    return run_doctor(host, bundle=BundleCheck(bundle) if bundle else None)


def by_topic(report, topic, severity=None):
    return [f for f in report.findings if f.topic == topic and (severity is None or f.severity == severity)]


@pytest.mark.parametrize(
    "version,name",
    [
        (90010, "gfx90a"),
        (90402, "gfx942"),
        (100306, "gfx1036"),
        (110501, "gfx1151"),
        (110000, "gfx1100"),
        (90012, "gfx90c"),
        (90000, "gfx900"),
        (120001, "gfx1201"),
        (100100, "gfx1010"),
    ],
)
def test_gfx_target_version_names(version, name):
    assert gfx_name(version) == name


@pytest.mark.parametrize(
    "value,name",
    [
        ("11.0.0", "gfx1100"),
        ("10.3.0", "gfx1030"),
        ("9.0.10", "gfx90a"),
        ("11.5.1", "gfx1151"),
        ("gfx1100", None),
        ("11.0", None),
        ("9.0.16", None),
    ],
)
def test_override_values(value, name):
    assert gfx_from_override(value) == name


def test_discrete_rdna3(tmp_path):
    report = doctor("rdna3-dgpu", tmp_path)
    (gpu,) = report.gpus
    assert (gpu.target, gpu.integrated, gpu.index, gpu.node, gpu.compute_units) == ("gfx1100", False, 0, 1, 96)
    assert gpu.drm_render_minor == 128 and gpu.products.startswith("RX 7900 XTX")
    assert report.ok, report.render()
    assert [f.severity for f in by_topic(report, "access")] == ["ok", "ok"]
    assert not by_topic(report, "memory")  # no APU: GTT limits do not matter
    assert by_topic(report, "kernel")[0].message == "Linux kernel 6.16.0-test"
    (rec,) = report.recommendations
    assert rec.flavour == "both" and "RDNA3" in rec.reason
    assert rec.command == (
        "rockbuild install --target gfx1100 --dest llama-rocm-gfx1100 && rockbuild install "
        "--backend vulkan --dest llama-vulkan && rockbuild compare llama-rocm-gfx1100 llama-vulkan "
        "--model MODEL.gguf"
    )


def test_strix_halo_apu_with_default_gtt_limit(tmp_path):
    report = doctor("strix-halo", tmp_path)
    (gpu,) = report.gpus
    assert (gpu.target, gpu.integrated, gpu.compute_units) == ("gfx1151", True, 40)
    assert "only exists as an APU" in gpu.integrated_reason
    (warning,) = by_topic(report, "memory", "warning")
    assert "may map only 61.8 GiB of 123.6 GiB RAM" in warning.message
    pages = int(129558720 * 1024 * 0.9) // 4096
    assert (
        warning.action == f"add ttm.pages_limit={pages} (90% of RAM in 4 KiB pages) to the kernel command line and "
        "reboot"
    )
    assert any("512" in f.message or "0.5 GiB" in f.message for f in by_topic(report, "memory", "info"))
    assert report.ok  # a warning, not an error
    assert report.recommendations[0].flavour == "both" and "APU" in report.recommendations[0].reason


def test_strix_halo_with_raised_ttm_limit(tmp_path):
    tree = tmp_path / "m"
    shutil.copytree(FIXTURES / "strix-halo", tree)
    pages = int(129558720 * 1024 * 0.9) // 4096
    (tree / "sys/module/ttm/parameters/pages_limit").write_text(f"{pages}\n")
    report = run_doctor(Machine(sysfs_root=tree / "sys", proc_root=tree / "proc", dev_root=dev_root(tmp_path), env={}))
    assert [f.severity for f in by_topic(report, "memory") if f.severity != "info"] == ["ok"]
    assert "may map 111.2 GiB of 123.6 GiB" in by_topic(report, "memory", "ok")[0].message


def test_igpu_listed_before_dgpu(tmp_path):
    report = doctor("igpu-dgpu", tmp_path, minors=(128, 129))
    assert [(g.index, g.target, g.integrated) for g in report.gpus] == [(0, "gfx1036", True), (1, "gfx1100", False)]
    (pin,) = [f for f in by_topic(report, "override", "warning") if "iGPU" in f.message]
    assert pin.action == "pin the dGPU: export HIP_VISIBLE_DEVICES=1"
    assert [f.severity for f in by_topic(report, "access")] == ["ok", "ok", "ok"]
    assert not by_topic(report, "memory")  # the model goes to the dGPU: the iGPU's GTT limit does not matter
    # once pinned, the warning is gone and the selection is reported
    pinned = doctor("igpu-dgpu", tmp_path / "2", env={"HIP_VISIBLE_DEVICES": "1"}, minors=(128, 129))
    assert not by_topic(pinned, "override", "warning")
    assert [f.message for f in by_topic(pinned, "override")] == ["HIP_VISIBLE_DEVICES=1 selects gfx1100"]


def test_no_gpu(tmp_path):
    """One finding says what was looked at and found (the KFD topology, /dev/kfd) and what to do; Vulkan is still
    recommended, since no ROCm build can run."""
    report = doctor("no-gpu", tmp_path)
    nodes = machine("no-gpu")[0] / "class/kfd/kfd/topology/nodes"
    assert report.gpus == () and not report.ok
    (error,) = report.errors
    assert error.message == (
        f"no AMD GPU found: the KFD topology ({nodes}) lists only CPU nodes and {tmp_path}/dev/kfd "
        "exists: the amdgpu driver is loaded but drives no GPU"
    )
    assert "enabled in the firmware" in error.action and "pass the GPU through" in error.action
    (rec,) = report.recommendations
    assert (rec.target, rec.flavour, rec.command) == ("", "vulkan", "rockbuild install --backend vulkan")
    assert rec.reason.startswith("the ROCm builds need one; the Vulkan build runs on any GPU with a Vulkan driver")
    empty = run_doctor(Machine(sysfs_root=tmp_path / "nothing", dev_root=tmp_path / "nodev", env={}))
    (error,) = empty.errors
    assert error.message == (
        f"no AMD GPU found: {tmp_path}/nothing/class/kfd does not exist and {tmp_path}/nodev/kfd "
        "is missing: the amdgpu kernel driver is not loaded (or has no KFD)"
    )
    assert "lsmod | grep amdgpu" in error.action and "in a VM, pass the GPU through" in error.action
    assert [r.flavour for r in empty.recommendations] == ["vulkan"]
    assert not [f for f in empty.findings if f.topic == "access"]  # /dev/kfd is told in the one finding


@pytest.mark.parametrize("sysfs", ["none", "cpu-only"])
def test_cli_without_a_gpu_says_once_what_it_found_what_to_do_and_which_build(run_rockbuild, tmp_path, sysfs):
    """The bug a new user hit: the error printed twice (in the report, then again with its hint as the CLI's error
    line) and no build recommended. Now: the finding and its action once in stdout and stderr together, a Vulkan
    recommendation, exit code 1 and one `error:` line that only counts the problems (the same line as with --json)."""
    sys_root = tmp_path / "sys" if sysfs == "none" else machine("no-gpu")[0]
    (tmp_path / "dev").mkdir()  # no /dev/kfd
    result = run_rockbuild("doctor", "--sysfs-root", str(sys_root), "--dev-root", str(tmp_path / "dev"))
    assert result.returncode == 1, result.stderr
    (error,) = run_doctor(Machine(sysfs_root=sys_root, dev_root=tmp_path / "dev", env={})).errors
    assert error.message.startswith("no AMD GPU found: ") and f"{tmp_path}/dev/kfd is missing" in error.message
    output = result.stdout + result.stderr
    assert output.count(error.message) == 1, output
    assert output.count(error.action) == 1, output
    assert output.count("no AMD GPU found") == 1, output
    assert f"  [error] {error.message}\n      -> {error.action}\n" in result.stdout
    assert (
        "Which build to try first:\n  no AMD GPU: vulkan (the ROCm builds need one; the Vulkan build runs on any "
        "GPU with a Vulkan driver"
    ) in result.stdout
    assert "      $ rockbuild install --backend vulkan" in result.stdout
    assert result.stderr.splitlines() == ["error: 1 problem found (gpu): the finding marked error says what to do"]


def test_override_on_a_gpu_that_has_a_build(tmp_path):
    report = doctor("strix-halo", tmp_path, env={"HSA_OVERRIDE_GFX_VERSION": "11.0.0", "HSA_ENABLE_SDMA": "0"})
    (warning,) = by_topic(report, "override", "warning")
    assert warning.message == (
        "HSA_OVERRIDE_GFX_VERSION=11.0.0 makes ROCm run gfx1100 code on gfx1151, for which real builds exist"
    )
    assert warning.action.endswith("(rockbuild install --target gfx1151)")
    assert [f.message for f in by_topic(report, "override", "info")] == ["HSA_ENABLE_SDMA=0 is set (a workaround)"]


def test_visibility_variable_hiding_every_gpu_is_an_error(tmp_path):
    report = doctor("rdna3-dgpu", tmp_path, env={"ROCR_VISIBLE_DEVICES": "3"})
    assert [f.message for f in report.errors] == [
        "ROCR_VISIBLE_DEVICES='3' hides every GPU: llama.cpp will run on the CPU"
    ]


def test_missing_device_nodes(tmp_path):
    empty = tmp_path / "dev"
    empty.mkdir()
    report = doctor("rdna3-dgpu", tmp_path, dev=empty)
    assert [f.message for f in report.errors] == [
        f"{empty}/kfd does not exist: ROCm cannot reach the compute driver, /dev/kfd",
        f"{empty}/dri/renderD128 does not exist: ROCm cannot reach gfx1100's render node",
    ]
    assert "--device /dev/kfd" in report.errors[0].action


def test_permissions_missing(run_rockbuild, request):
    """Device files this user may not open: an error per file, naming the group to join; the command exits 1."""
    # pytest's tmp_path is private to its owner; user nobody needs to reach the folder
    base = Path(tempfile.mkdtemp(prefix="rockbuild-doctor-"))
    request.addfinalizer(lambda: shutil.rmtree(base, ignore_errors=True))
    base.chmod(0o755)
    dev = dev_root(base, mode=0o000)
    (base / "dev").chmod(0o755)
    (base / "dev" / "dri").chmod(0o755)
    sys_root, proc_root = machine("rdna3-dgpu")
    args = ["doctor", "--json", "--sysfs-root", str(sys_root), "--dev-root", str(dev), "--proc-root", str(proc_root)]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv (util-linux): cannot drop privileges to test access")
        result = subprocess.run(
            [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", rockbuild_exe(), *args],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=base,
            env={"PATH": os.environ.get("PATH", ""), "HOME": str(base)},
        )
    else:
        result = run_rockbuild(*args)
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    errors = [f for f in data["findings"] if f["severity"] == "error"]
    assert [e["message"].split(" (")[0] for e in errors] == [
        f"this user cannot open {dev}/kfd",
        f"this user cannot open {dev}/dri/renderD128",
    ]
    assert all("silently runs on the CPU" in e["message"] and "sudo usermod -aG" in e["action"] for e in errors)
    assert result.stderr.splitlines() == ["error: 2 problems found (access): the findings marked error say what to do"]


def test_bundle_without_kernels_for_the_gpu(tmp_path):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "bundle.json").write_text(json.dumps({"format": 1, "platform": "linux", "targets": ["gfx1151"]}))
    cc(bundle / "llama-server", "int main(void){return 0;}\n")  # an empty folder is no bundle: the audit fails it
    report = doctor("rdna3-dgpu", tmp_path, bundle=bundle)
    (error,) = report.errors
    assert error.message.startswith(f"{bundle} has kernels for gfx1151, not for gfx1100")
    assert error.action == "rockbuild install --target gfx1100"
    assert report.bundle["targets"] == ["gfx1151"] and report.bundle["audit_ok"] is True


def test_bundle_that_covers_the_gpu_and_one_failing_its_audit(tmp_path):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "bundle.json").write_text(json.dumps({"format": 1, "platform": "linux", "targets": ["gfx1100"]}))
    cc(bundle / "llama-server", "int main(void){return 0;}\n")  # an empty folder is no bundle: the audit fails it
    good = doctor("rdna3-dgpu", tmp_path / "a", bundle=bundle)
    assert good.ok and [f.severity for f in by_topic(good, "bundle")] == ["ok", "ok"]
    (bundle / "library").mkdir()  # rocBLAS would read this before rocblas/library: the audit refuses it
    bad = doctor("rdna3-dgpu", tmp_path / "b", bundle=bundle)
    (error,) = bad.errors
    assert error.message.startswith(f"{bundle}: audit failed (1): kernel-data: a library/ folder sits beside")


FAKE_VULKAN_CLI = """#!{python}
import sys
MODE = {mode!r}
if MODE == "noloader":
    sys.stderr.write("llama-cli: error while loading shared libraries: libvulkan.so.1: cannot open shared object "
                     "file: No such file or directory\\n")
    sys.exit(127)
assert sys.argv[1:] == ["--list-devices"], sys.argv
print("Available devices:")
print("  Vulkan0: AMD Radeon RX 7900 XTX (RADV NAVI31) (24560 MiB, 24000 MiB free)" if MODE == "radv" else "  (none)")
"""


def vulkan_bundle(base: Path, mode: str) -> Path:
    """A Vulkan bundle (bundle.json says so) whose llama-cli answers --list-devices like llama.cpp does."""
    import sys

    bundle = base / f"bundle-{mode}"
    bundle.mkdir(parents=True)
    (bundle / "bundle.json").write_text(
        json.dumps({"format": 1, "platform": "linux", "backend": "vulkan", "targets": []})
    )
    cli = bundle / "llama-cli"
    cli.write_text(FAKE_VULKAN_CLI.format(python=sys.executable, mode=mode))
    cli.chmod(0o755)
    cc(bundle / "llama-server", "int main(void){return 0;}\n")  # the audit wants an ELF program; the script is none
    return bundle


def test_vulkan_bundle_lists_the_devices_it_sees_and_never_asks_for_gfx_kernels(tmp_path):
    report = doctor("rdna3-dgpu", tmp_path, bundle=vulkan_bundle(tmp_path, "radv"))
    assert report.ok, report.errors
    (seen,) = by_topic(report, "vulkan")
    assert seen.severity == "ok" and seen.message == (
        "the Vulkan build sees Vulkan0: AMD Radeon RX 7900 XTX (RADV NAVI31)"
    )
    assert not [f for f in by_topic(report, "bundle") if "kernels" in f.message]
    assert report.bundle["backend"] == "vulkan" and report.bundle["vulkan_devices"] == [
        "Vulkan0: AMD Radeon RX 7900 XTX (RADV NAVI31)"
    ]


def test_vulkan_bundle_without_a_driver_or_without_the_loader(tmp_path):
    none = doctor("rdna3-dgpu", tmp_path / "a", bundle=vulkan_bundle(tmp_path, "none"))
    (error,) = none.errors
    assert error.message == (
        "the Vulkan build sees no Vulkan device although an AMD GPU is present: it would run on the CPU"
    )
    assert "mesa-vulkan-drivers" in error.action
    loader = doctor("rdna3-dgpu", tmp_path / "b", bundle=vulkan_bundle(tmp_path, "noloader"))
    (error,) = loader.errors
    assert "libvulkan.so.1: cannot open shared object file" in error.message and "exit code 127" in error.message
    assert "apt install libvulkan1" in error.action


def _gpu(target: str, integrated: bool = False) -> Gpu:
    table = load_families()
    products = next((f.gpus[target] for f in table.families if f.resolve_targets and target in f.gpus), "")
    return Gpu(0, 1, target, products, integrated, "", 10, 20, 0, 128, 0)


@pytest.mark.parametrize(
    "target,integrated,flavour",
    [
        ("gfx90a", False, "rocm"),
        ("gfx942", False, "rocm"),  # Instinct
        ("gfx1201", False, "both"),
        ("gfx1100", False, "both"),
        ("gfx1151", True, "both"),
        ("gfx1036", True, "both"),
        ("gfx1031", False, "vulkan"),
        ("gfx1010", False, "vulkan"),  # older Radeon
        ("gfx902", True, "vulkan"),
        ("gfx1013", False, "vulkan"),  # no ROCm build at all
    ],
)
def test_flavour_recommendation(target, integrated, flavour):
    (rec,) = recommend_flavours([_gpu(target, integrated)], load_families())
    assert rec.flavour == flavour, rec
    if flavour == "both":
        assert f"rockbuild compare llama-rocm-{target} llama-vulkan --model MODEL.gguf" in rec.command
    elif flavour == "rocm":
        assert rec.command == f"rockbuild install --target {target}"
    else:
        assert rec.command == "rockbuild install --backend vulkan"


def test_cli_json_and_exit_codes(run_rockbuild, tmp_path):
    sys_root, proc_root = machine("strix-halo")
    dev = dev_root(tmp_path)
    ok = run_rockbuild(
        "doctor", "--json", "--sysfs-root", str(sys_root), "--dev-root", str(dev), "--proc-root", str(proc_root)
    )
    assert ok.returncode == 0, ok.stderr
    data = json.loads(ok.stdout)
    assert data["ok"] is True and [g["target"] for g in data["gpus"]] == ["gfx1151"]
    assert data["gpus"][0]["device_id"] == "0x1586"
    assert {f["severity"] for f in data["findings"]} <= {"ok", "info", "warning", "error"}
    text = run_rockbuild("doctor", "--sysfs-root", str(machine("no-gpu")[0]), "--dev-root", str(dev))
    assert text.returncode == 1
    assert "[error] no AMD GPU found: the KFD topology (" in text.stdout
    # one summary, the same words after the text report and after --json (whose findings carry the message and action)
    summary = ["error: 1 problem found (gpu): the finding marked error says what to do"]
    assert text.stderr.splitlines() == summary
    data_no_gpu = run_rockbuild("doctor", "--json", "--sysfs-root", str(machine("no-gpu")[0]), "--dev-root", str(dev))
    assert data_no_gpu.returncode == 1
    (error,) = [f for f in json.loads(data_no_gpu.stdout)["findings"] if f["severity"] == "error"]
    assert error["topic"] == "gpu" and error["message"] and error["action"]
    assert data_no_gpu.stderr.splitlines() == summary
    assert [r["flavour"] for r in json.loads(data_no_gpu.stdout)["recommendations"]] == ["vulkan"]


def test_read_kfd_gpus_skips_cpu_nodes_and_junk(tmp_path):
    tree = tmp_path / "sys"
    shutil.copytree(machine("igpu-dgpu")[0], tree)
    nodes = tree / "class/kfd/kfd/topology/nodes"
    (nodes / "README").write_text("not a node")
    (nodes / "3").mkdir()  # a node whose properties vanished (hot unplug): skipped
    assert [g.target for g in read_kfd_gpus(tree)] == ["gfx1036", "gfx1100"]


def test_no_amd_gpu_is_not_a_problem_for_a_vulkan_bundle_that_sees_a_gpu(tmp_path):
    """Seen on the lent NVIDIA H200 (docs/gpu.md): the Vulkan bundle runs there, so doctor must not fail on the
    missing AMD GPU; it still says so, and what the bundle runs on."""
    report = doctor("no-gpu", tmp_path, bundle=vulkan_bundle(tmp_path, "radv"))
    assert report.ok, report.errors
    (gpu,) = by_topic(report, "gpu")
    assert gpu.severity == "info" and gpu.message.startswith("no AMD GPU: ")
    assert (
        gpu.action == "nothing to do for the Vulkan build, which runs on Vulkan0: AMD Radeon RX 7900 XTX (RADV NAVI31)"
    )
    without = doctor("no-gpu", tmp_path / "plain")
    assert not without.ok and by_topic(without, "gpu")[0].severity == "error"


def test_gpus_of_two_families_get_one_mixed_bundle_recommended(tmp_path):
    """An iGPU and a dGPU of different families (gfx1036: gfx103X, gfx1100: gfx110X): one mixed-GPU bundle with
    exactly both targets, as the matrix writes it (target: [a, b]) and names its job (linux-a+b)."""
    report = doctor("igpu-dgpu", tmp_path, minors=(128, 129))
    assert [r.target for r in report.recommendations] == ["gfx1036", "gfx1100", "gfx1036+gfx1100"]
    mixed = report.recommendations[-1]
    assert mixed.flavour == "rocm"
    assert mixed.reason == (
        "GPUs of 2 families, gfx1036 (gfx103X), gfx1100 (gfx110X): to use them together, one "
        "mixed-GPU bundle carries exactly these targets (job linux-gfx1036+gfx1100, asset "
        "...-rocm-gfx1036-gfx1100-x64)"
    )
    assert mixed.command == (
        "add '- target: [gfx1036, gfx1100]' to the matrix, then rockbuild build --job linux-gfx1036+gfx1100"
    )
    assert "gfx1036+gfx1100: rocm (GPUs of 2 families" in report.render()
    # Strix Halo beside an RDNA4 card, in either order: the same job
    table = load_families()
    strix_rdna4 = recommend_flavours([_gpu("gfx1201"), _gpu("gfx1151", integrated=True)], table)
    assert strix_rdna4[-1].target == "gfx1151+gfx1201" and "job linux-gfx1151+gfx1201" in strix_rdna4[-1].reason
    # one family (two RDNA3 cards), or a GPU without any ROCm build beside one: nothing to mix
    assert [r.target for r in recommend_flavours([_gpu("gfx1100"), _gpu("gfx1101")], table)] == ["gfx1100", "gfx1101"]
    assert [r.target for r in recommend_flavours([_gpu("gfx902", True), _gpu("gfx1100")], table)] == [
        "gfx902",
        "gfx1100",
    ]


def test_no_amd_gpu_is_not_a_problem_for_a_cpu_bundle(tmp_path):
    """A CPU build (the Windows end-to-end job's flavour) needs no GPU: doctor says there is none, as information."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "bundle.json").write_text(
        json.dumps({"backend": "cpu", "platform": "linux", "targets": [], "audit": {"ok": True}}), encoding="utf-8"
    )
    report = doctor("no-gpu", tmp_path, bundle=bundle)
    (gpu,) = by_topic(report, "gpu")
    assert gpu.severity == "info" and gpu.message.startswith("no AMD GPU: ")
    assert gpu.action == "nothing to do for a CPU build"
    assert by_topic(report, "cpu", "ok")[0].message.startswith("a CPU build: it needs no GPU driver")


# -- which container image fits (issue 42) ------------------------------------------------------------------------------

IMAGES = "ghcr.io/lemonade-sdk/llamacpp-rocm"


def test_doctor_names_the_image_that_fits_each_gpu(tmp_path):
    """As it names the asset: the ROCm image of the GPU's family (the tag publish gives that family's job) and the
    Vulkan image, in the order of the recommendation, with the one podman command that runs the first."""
    from support.publishing import make_job

    from rockbuild.publish.image import image_flavour
    from rockbuild.publish.jobs import load_job

    (rdna3,) = doctor("rdna3-dgpu", tmp_path / "a").recommendations
    assert rdna3.images == (f"{IMAGES}:rocm-gfx110x", f"{IMAGES}:vulkan")
    job = load_job(make_job(tmp_path / "out", "linux-gfx110X", targets=("gfx1100", "gfx1101", "gfx1102", "gfx1103")))
    assert rdna3.images[0].endswith(":" + image_flavour(job))  # the moving tag of the image the release pushed
    assert rdna3.image_command == (
        "podman run -d --name llama-server --device /dev/kfd --device /dev/dri --group-add keep-groups -p 8080:8080 "
        f"-v ~/models:/models:ro,Z {IMAGES}:rocm-gfx110x -m /models/MODEL.gguf"
    )
    (strix,) = doctor("strix-halo", tmp_path / "b").recommendations
    assert strix.images[0] == f"{IMAGES}:rocm-gfx1151"
    (none,) = doctor("no-gpu", tmp_path / "c").recommendations
    assert none.images == (f"{IMAGES}:vulkan",) and "--device /dev/dri " in none.image_command
    assert "/dev/kfd" not in none.image_command
    text = doctor("rdna3-dgpu", tmp_path / "d").render()
    assert f"      container: {IMAGES}:rocm-gfx110x (or {IMAGES}:vulkan)\n      $ podman run -d" in text


@pytest.mark.parametrize(
    "target,integrated,images",
    [
        ("gfx90a", False, ["rocm-gfx90a"]),
        ("gfx1031", False, ["vulkan"]),  # Instinct; an older Radeon: Vulkan first
        ("gfx1201", False, ["rocm-gfx120x", "vulkan"]),
        ("gfx902", True, ["vulkan"]),  # no ROCm build: no ROCm image
    ],
)
def test_the_image_follows_the_recommendation(target, integrated, images):
    (rec,) = recommend_flavours([_gpu(target, integrated)], load_families())
    assert [i.rsplit(":", 1)[1] for i in rec.images] == images
    assert not recommend_flavours([_gpu(target, integrated)], load_families(), images=False)[0].images  # Windows
    mixed = recommend_flavours([_gpu("gfx1036", True), _gpu("gfx1100")], load_families())[-1]
    assert "+" in mixed.target and mixed.images == ()  # a mixed-GPU bundle is built by the user: no image


def test_cli_json_names_the_images(run_rockbuild, tmp_path):
    sys_root, proc_root = machine("strix-halo")
    ok = run_rockbuild(
        "doctor",
        "--json",
        "--sysfs-root",
        str(sys_root),
        "--dev-root",
        str(dev_root(tmp_path)),
        "--proc-root",
        str(proc_root),
    )
    assert ok.returncode == 0, ok.stderr
    (rec,) = json.loads(ok.stdout)["recommendations"]
    assert (
        rec["images"] == [f"{IMAGES}:rocm-gfx1151", f"{IMAGES}:vulkan"] and "--device /dev/kfd" in rec["image_command"]
    )
