"""Stage 1: families table, matrix expansion, selectors, output formats and every error path."""

from __future__ import annotations

import json
import re

import pytest
from conftest import SHARED
from support.paths import REPO

from rockbuild.core.errors import ConfigError, UsageError
from rockbuild.core.jobs import Job, load_families
from rockbuild.matrix import github_matrix, load_matrix, select_jobs, split_list, write_github_output

SEED_TARGETS = ["gfx1151", "gfx1150", "gfx120X", "gfx110X", "gfx103X", "gfx90a", "gfx908"]


@pytest.fixture(scope="module")
def families():
    return load_families()


@pytest.fixture(scope="module")
def default_jobs(families):
    return load_matrix(None, families)


# --- the default matrix -------------------------------------------------------------------------------------------


def test_default_matrix_has_the_seed_set_on_both_oses_plus_what_users_asked_for(default_jobs):
    ids = [j.id for j in default_jobs]
    assert len(ids) == len(set(ids)) >= 18
    for os_name in ("linux", "windows"):
        for target in [*SEED_TARGETS, "gfx1152", "gfx1153"]:
            assert f"{os_name}-{target}" in ids
    assert "linux-gfx942" in ids and "windows-gfx942" not in ids


def test_default_matrix_groups_and_targets(default_jobs):
    by_id = {j.id: j for j in default_jobs}
    assert by_id["linux-gfx110X"].group == "gfx110X-all"
    assert by_id["linux-gfx110X"].targets == ("gfx1100", "gfx1101", "gfx1102", "gfx1103")
    assert by_id["linux-gfx110X"].legacy_groups == ("gfx110X-dgpu",)
    # the whole TheRock family, not the seed's four (680M/660M users got "device kernel image is invalid")
    assert by_id["windows-gfx103X"].targets == tuple(f"gfx103{i}" for i in range(7))
    assert by_id["windows-gfx120X"].gpu_targets == "gfx1200;gfx1201"
    assert by_id["linux-gfx942"].group == "gfx94X-dcgpu" and by_id["linux-gfx942"].targets == ("gfx942",)
    assert by_id["linux-gfx908"].legacy_groups == ("gfx90X-dcgpu",)
    assert by_id["linux-gfx1151"].runner == "ubuntu-22.04" and by_id["windows-gfx1151"].runner == "windows-2022"
    assert by_id["linux-gfx1151"].required and not by_id["linux-gfx1152"].required
    assert not by_id["windows-gfx1153"].required and not by_id["linux-gfx942"].required
    assert all(j.rocm_channel == "nightly" and j.rocm_version == "latest" for j in default_jobs)


def _therock_table_rows():
    ref = SHARED / "reference" / "therock.md"
    if not ref.exists():
        pytest.skip(f"{ref} is not here (the shared reference folder sits beside the repository)")
    text = ref.read_text(encoding="utf-8")
    section = text.split("## 1. GPU families", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "`" in line]
    assert len(rows) >= 17
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


def test_every_row_of_therocks_family_table_is_in_families_yaml(families):
    linux_groups = {f.group_for("linux"): f for f in families.families}
    windows_groups = {f.group_for("windows") for f in families.families}
    for first, linux, windows, legacy, *_ in _therock_table_rows():
        linux_group = re.findall(r"`([^`]+)`", linux)[0]
        assert linux_group in linux_groups, f"Linux group {linux_group} from therock.md is missing"
        fam = linux_groups[linux_group]
        if "not published" in windows:
            if linux_group != "multiarch":
                assert fam.group_for("windows") is None, f"{linux_group} must not have a Windows tarball"
        else:
            assert re.findall(r"`([^`]+)`", windows)[0] in windows_groups
        for old in re.findall(r"`(gfx[^`]+)`", legacy):
            assert old in fam.legacy_groups, f"legacy group {old} of {linux_group} is missing"
        # the targets named in the first column
        m = re.search(r"\((.+)\)", first)
        if m and "gfx" in m.group(1):
            spec = m.group(1)
            if ".." in spec:  # gfx1030..gfx1036
                lo, hi = re.findall(r"gfx(\d+)", spec)
                expected = [f"gfx{n}" for n in range(int(lo), int(hi) + 1)]
            else:
                parts = spec.split(";")
                head = re.match(r"(gfx\d+)", parts[0]).group(1)
                expected = [head] + [f"gfx{p}" if not p.startswith("gfx") else p for p in parts[1:]]
            assert list(fam.targets) == expected
        elif first.startswith("gfx"):
            assert list(fam.targets) == [first.split()[0]]


# --- names: aliases and single targets ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "family", "targets", "short"),
    [
        ("gfx110X", "gfx110X-all", ("gfx1100", "gfx1101", "gfx1102", "gfx1103"), "gfx110X"),
        ("gfx110X-all", "gfx110X-all", ("gfx1100", "gfx1101", "gfx1102", "gfx1103"), "gfx110X"),
        ("gfx103X", "gfx103X-all", tuple(f"gfx103{i}" for i in range(7)), "gfx103X"),
        ("gfx120X", "gfx120X-all", ("gfx1200", "gfx1201"), "gfx120X"),
        ("gfx115X", "gfx115X-all", ("gfx1150", "gfx1151", "gfx1152", "gfx1153"), "gfx115X"),
        ("gfx1100", "gfx110X-all", ("gfx1100",), "gfx1100"),
        ("gfx1036", "gfx103X-all", ("gfx1036",), "gfx1036"),
        ("gfx1151", "gfx1151", ("gfx1151",), "gfx1151"),
        ("gfx942", "gfx94X-dcgpu", ("gfx942",), "gfx942"),
        ("gfx906", "gfx906", ("gfx906",), "gfx906"),
    ],
)
def test_alias_and_single_target_resolution(families, name, family, targets, short):
    sel = families.select(name)
    assert (sel.family.name, sel.targets, sel.short) == (family, targets, short)


def test_unknown_family_suggests_close_names(families):
    with pytest.raises(ConfigError, match=r"unknown GPU family or target 'gfx1115'.*did you mean.*gfx1151"):
        families.select("gfx1115")


# --- include / exclude --------------------------------------------------------------------------------------------


def test_include_adds_options_to_matching_jobs_and_new_jobs_otherwise(write, families):
    path = write(
        "m.yaml",
        """
        options:
          llama_ref: b7000
          cmake: {GGML_RPC: "ON"}
        matrix:
          os: [linux, windows]
          target: [gfx1151, gfx110X]
          exclude:
            - {os: windows, target: gfx110X}
          include:
            - {target: gfx1151, required: false, cmake: {GGML_HIP_ROCWMMA_FATTN: true}}
            - {os: linux, target: gfx1100, llama_ref: b7001, rocm: {version: 10.2.0a20261128}}
        """,
    )
    jobs = {j.id: j for j in load_matrix(path, families)}
    assert list(jobs) == ["linux-gfx1151", "linux-gfx110X", "windows-gfx1151", "linux-gfx1100"]
    assert not jobs["linux-gfx1151"].required and not jobs["windows-gfx1151"].required
    assert dict(jobs["linux-gfx1151"].cmake) == {"GGML_RPC": "ON", "GGML_HIP_ROCWMMA_FATTN": "ON"}
    assert jobs["linux-gfx110X"].required and jobs["linux-gfx110X"].llama_ref == "b7000"
    assert jobs["linux-gfx1100"].llama_ref == "b7001" and jobs["linux-gfx1100"].targets == ("gfx1100",)
    assert jobs["linux-gfx1100"].rocm_version == "10.2.0a20261128" and jobs["linux-gfx1100"].rocm_channel == "nightly"


def test_include_never_overwrites_an_axis_value(write, families):
    # {os: windows, target: gfx1151} cannot be merged into linux-gfx1151: it adds windows-gfx1151 instead
    path = write(
        "m.yaml",
        """
        matrix:
          os: [linux]
          target: [gfx1151]
          include:
            - {os: windows, target: gfx1151, required: false}
        """,
    )
    jobs = {j.id: j for j in load_matrix(path, families)}
    assert jobs["linux-gfx1151"].required and not jobs["windows-gfx1151"].required


def test_axis_overrides_replace_the_matrix_and_skip_unpublished(families, capsys):
    jobs = load_matrix(None, families, os_override=["windows", "linux"], target_override=["gfx942", "gfx1036"])
    assert [j.id for j in jobs if not j.is_common_part] == ["windows-gfx1036", "linux-gfx942", "linux-gfx1036"]
    assert [j.id for j in jobs if j.is_common_part] == ["windows-common", "linux-common"]  # the shipped common_part
    assert "skipping windows-gfx942" in capsys.readouterr().err


# --- selectors ------------------------------------------------------------------------------------------------------


def test_only_globs_with_braces(default_jobs):
    ids = [j.id for j in select_jobs(default_jobs, ["linux-gfx11{50,51}"])]
    assert ids == ["linux-common", "linux-gfx1151", "linux-gfx1150"]  # the common part they build on comes along
    ids = [j.id for j in select_jobs(default_jobs, ["*-gfx1{10,20}X", "windows-gfx90?"])]
    assert ids == [
        "linux-common",
        "windows-common",
        "linux-gfx120X",
        "linux-gfx110X",
        "windows-gfx120X",
        "windows-gfx110X",
        "windows-gfx90a",
        "windows-gfx908",
        "windows-gfx906",
    ]
    assert [j.id for j in select_jobs(default_jobs, ["*"], os_name="windows")][:2] == [
        "windows-common",
        "windows-gfx1151",
    ]


def test_only_glob_matching_nothing_is_an_error(default_jobs):
    with pytest.raises(UsageError, match=r"--only 'linux-gfx1160' matches no job \(did you mean linux-gfx1150"):
        select_jobs(default_jobs, ["linux-gfx1160"])


def test_split_list_accepts_the_seed_input_style():
    assert split_list(['"windows, ubuntu"'], aliases={"ubuntu": "linux"}) == ["windows", "linux"]
    assert split_list(["gfx1151,gfx110X", "gfx942"]) == ["gfx1151", "gfx110X", "gfx942"]


# --- github format ----------------------------------------------------------------------------------------------


def test_github_matrix_shape_and_output_file(default_jobs, tmp_path):
    default_jobs = [j for j in default_jobs if not j.is_common_part]
    data = github_matrix(default_jobs[:2])
    assert list(data) == ["include"]
    first = data["include"][0]
    assert first["id"] == "linux-gfx1151" and first["targets"] == ["gfx1151"] and first["runner"] == "ubuntu-22.04"
    out = tmp_path / "github_output"
    out.write_text("earlier=1\n")
    write_github_output(default_jobs[:2], out)
    lines = out.read_text().splitlines()
    assert lines[0] == "earlier=1" and lines[1].startswith("matrix=") and len(lines) == 2
    assert json.loads(lines[1].removeprefix("matrix=")) == data


# --- error paths: one line, file and line number --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("matrix:\n  os: [linux\n  target: [gfx1151]\n", r"m\.yaml:3: invalid YAML"),
        (
            "matrix:\n  os: [linux]\n  target: [gfx1160]\n",
            r"m\.yaml:3: unknown GPU family or target 'gfx1160' \(did you mean",
        ),
        (
            "matrix:\n  os: [linux]\n  targets: [gfx1151]\n",
            r"m\.yaml:3: unknown key 'targets' in matrix \(did you mean target\?\)",
        ),
        ("options:\n  requird: false\nmatrix: {os: [linux], target: [gfx1151]}\n", r"m\.yaml:2: unknown key 'requird'"),
        (
            "options:\n  required: maybe\nmatrix: {os: [linux], target: [gfx1151]}\n",
            r"m\.yaml:2: options\.required must be true, false or when-proven, not 'maybe'",
        ),
        ("matrix:\n  os: [linux]\n  target: []\n", r"the matrix is empty"),
        ("", r"the matrix file is empty"),
        ("matrix:\n  os: [macos]\n  target: [gfx1151]\n", r"m\.yaml:2: unknown os 'macos'"),
        ("matrix:\n  os: [windows]\n  target: [gfx942]\n", r"gfx942 cannot be built for windows.*exclude"),
        ("matrix:\n  os: [linux]\n  target: [gfx110X, gfx110X-all]\n", r"job linux-gfx110X is defined twice"),
        (
            "matrix:\n  os: [linux]\n  target: [gfx1151]\n  include:\n    - {target: gfx1100}\n",
            r"m\.yaml:5: .*lacks 'os'",
        ),
        (
            "options:\n  rocm: {channel: nighty}\nmatrix: {os: [linux], target: [gfx1151]}\n",
            r"unknown ROCm channel 'nighty' \(did you mean nightly",
        ),
        (
            "options:\n  cmake: {'-DX': 1}\nmatrix: {os: [linux], target: [gfx1151]}\n",
            r"m\.yaml:2: '-DX' is not a CMake variable name",
        ),
        ("matrix:\n  os: [linux]\n  target: [gfx1151]\n  os: [windows]\n", r"m\.yaml:4: duplicate key 'os'"),
    ],
)
def test_matrix_errors_name_file_and_line(write, families, text, pattern):
    path = write("m.yaml", text)
    with pytest.raises(ConfigError, match=pattern) as info:
        load_matrix(path, families)
    assert "\n" not in str(info.value)


def test_missing_matrix_file(tmp_path, families):
    with pytest.raises(ConfigError, match=r"nope\.yaml: no such file"):
        load_matrix(tmp_path / "nope.yaml", families)


def test_broken_family_table_is_reported_with_line(write):
    path = write(
        "families.yaml",
        """
        families:
          gfx1151:
            targets: {gfx1151: x}
            groups: {linux: gfx1151}
        """,
    )
    with pytest.raises(ConfigError, match=r"families\.yaml:4: gfx1151\.groups needs 'windows'"):
        load_families(path)


# --- the backend axis ---------------------------------------------------------------------------------------------


VULKAN_MATRIX = """
matrix:
  os: [linux, windows]
  target: [gfx1151, gfx110X]
  include:
    - {os: linux, backend: vulkan, required: false}
    - {os: windows, backend: vulkan, required: false}
"""


def test_vulkan_includes_add_one_job_per_os_and_rocm_ids_are_unchanged(write, families):
    jobs = load_matrix(write("m.yaml", VULKAN_MATRIX), families)
    by_id = {j.id: j for j in jobs}
    for os_name in ("linux", "windows"):
        job = by_id[f"{os_name}-vulkan"]
        assert (job.backend, job.name, job.family, job.group, job.targets) == ("vulkan", "vulkan", "", "", ())
        assert job.gpu_targets == "" and job.legacy_groups == () and not job.required
        assert job.to_dict()["backend"] == "vulkan" and job.to_dict()["targets"] == []
    assert [j.id for j in jobs if j.backend == "vulkan"] == ["linux-vulkan", "windows-vulkan"]
    assert by_id["linux-gfx1151"].backend == "rocm" and by_id["linux-gfx1151"].to_dict()["backend"] == "rocm"
    assert sum(j.backend == "rocm" for j in jobs) == 4


def test_default_matrix_has_one_optional_vulkan_job_per_os(default_jobs):
    vulkan = [j for j in default_jobs if j.backend == "vulkan"]
    assert [(j.id, j.required, j.targets, j.group) for j in vulkan] == [
        ("linux-vulkan", False, (), ""),
        ("windows-vulkan", False, (), ""),
    ]
    assert {j.runner for j in vulkan} == {"ubuntu-22.04", "windows-2022"}


def test_a_vulkan_only_matrix_needs_no_target_list(write, families):
    path = write("m.yaml", "matrix:\n  os: [linux, windows]\n  backend: [vulkan]\n")
    assert [j.id for j in load_matrix(path, families)] == ["linux-vulkan", "windows-vulkan"]
    with pytest.raises(ConfigError, match="needs a 'target' list"):
        load_matrix(write("r.yaml", "matrix:\n  os: [linux]\n  backend: [rocm, vulkan]\n"), families)


def test_backend_axis_crosses_os_only_and_filters_apply(write, families):
    path = write(
        "m.yaml",
        """
        matrix:
          os: [linux, windows]
          target: [gfx1151]
          backend: [rocm, vulkan]
          exclude:
            - {os: windows, backend: vulkan}
          include:
            - {backend: vulkan, cmake: {GGML_VULKAN_VALIDATE: "OFF"}}
            - {os: linux, required: false}
        """,
    )
    jobs = {j.id: j for j in load_matrix(path, families)}
    assert list(jobs) == ["linux-gfx1151", "windows-gfx1151", "linux-vulkan"]
    assert jobs["linux-vulkan"].cmake == (("GGML_VULKAN_VALIDATE", "OFF"),) and jobs["linux-gfx1151"].cmake == ()
    assert not jobs["linux-vulkan"].required and not jobs["linux-gfx1151"].required and jobs["windows-gfx1151"].required
    only_vulkan = write("v.yaml", "matrix: {os: [linux], target: [gfx1151], backend: vulkan}\n")
    assert [(j.id, j.targets) for j in load_matrix(only_vulkan, families)] == [("linux-vulkan", ())]


def test_overrides_keep_vulkan_for_os_but_drop_it_for_targets(write, families):
    path = write("m.yaml", VULKAN_MATRIX)
    jobs = load_matrix(path, families, os_override=["linux"])
    assert "linux-vulkan" in [j.id for j in jobs] and all(j.os == "linux" for j in jobs)
    jobs = load_matrix(path, families, os_override=["linux"], target_override=["gfx1151"])
    assert [j.id for j in jobs] == ["linux-gfx1151"]
    # a manual night names the flavours that are one job per OS beside the families (the workflow's default does)
    jobs = load_matrix(path, families, os_override=["linux"], target_override=["gfx1151", "vulkan"])
    assert sorted(j.id for j in jobs) == ["linux-gfx1151", "linux-vulkan"]
    assert {j.id for j in load_matrix(path, families, target_override=["vulkan"])} == {
        f"{o}-vulkan" for o in {j.os for j in load_matrix(path, families)}
    }


def test_a_manual_night_with_the_workflows_default_inputs_builds_the_scheduled_nights_flavours():
    """The dispatch inputs replace the matrix's axes; with their defaults the night still carries Vulkan (it once
    could not: --target dropped every job that is not per target, and 'vulkan' was an unknown target)."""
    import yaml

    inputs = yaml.safe_load((REPO / ".github" / "workflows" / "nightly.yml").read_text())[True]["workflow_dispatch"]
    oses = [o.replace("ubuntu", "linux") for o in inputs["inputs"]["operating_systems"]["default"].split(",")]
    targets = inputs["inputs"]["gfx_target"]["default"].split(",")
    manual = {j.id for j in load_matrix(None, os_override=oses, target_override=targets)}
    scheduled = {j.id for j in load_matrix(None)}
    assert {j for j in scheduled if j.endswith("-vulkan")} <= manual and "linux-vulkan" in manual


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        (
            "matrix: {os: [linux], target: [gfx1151], backend: [rocm, vulcan]}\n",
            r"m\.yaml:1: unknown backend 'vulcan' \(did you mean vulkan\?\); known: rocm, cpu, vulkan",
        ),
        (
            "matrix:\n  os: [linux]\n  target: [gfx1151]\n  include:\n    - {os: linux, backend: vulkan, target: gfx1151}\n",
            r"m\.yaml:5: a Vulkan job is one per OS, not per GPU target",
        ),
        (
            "matrix:\n  os: [linux]\n  target: [gfx1151]\n  include:\n    - {backend: vulkan}\n",
            r"m\.yaml:5: .*lacks 'os'",
        ),
    ],
)
def test_backend_errors_name_file_and_line(write, families, text, pattern):
    path = write("m.yaml", text)
    with pytest.raises(ConfigError, match=pattern):
        load_matrix(path, families)


@pytest.mark.parametrize(
    "depth, pattern",
    [
        (900, r"m\.yaml: nested too deeply to read; a configuration file may nest at most 32 levels"),
        (40, r"m\.yaml:1: nested 4\d levels deep; a configuration file may nest at most 32"),
    ],
)
def test_deeply_nested_yaml_is_a_configuration_error(write, run_rockbuild, depth, pattern):
    """It was `internal error: RecursionError` (exit 70): a bad file is the user's to fix, with its name."""
    path = write(
        "m.yaml", "options: {cmake: " + "[" * depth + "]" * depth + "}\nmatrix: {os: [linux], target: [gfx1151]}\n"
    )
    result = run_rockbuild("matrix", "-c", str(path))
    assert result.returncode == 2, result.stderr
    assert re.search(pattern, result.stderr) and len(result.stderr.splitlines()) == 1, result.stderr


def test_gpu_smoke_runners_are_data_and_reach_the_plan(write, families, tmp_path):
    """Issue 19: `gpu_smoke: {runner: [labels], required: bool}` per job; the plan turns it into the GPU legs."""
    from rockbuild.nightly.run import NightPlan

    path = write(
        "m.yaml",
        """
        matrix:
          os: [linux]
          target: [gfx1151, gfx110X]
          include:
            - {target: gfx1151, gpu_smoke: {runner: [self-hosted, gfx1151]}}
            - {target: gfx110X, gpu_smoke: {runner: rdna3-box, required: false}}
        """,
    )
    jobs = {j.id: j for j in load_matrix(path, families)}
    strix, rdna3 = jobs["linux-gfx1151"], jobs["linux-gfx110X"]
    assert (strix.gpu_runner, strix.gpu_required) == (("self-hosted", "gfx1151"), True)
    assert (rdna3.gpu_runner, rdna3.gpu_required) == (("rdna3-box",), False)
    assert strix.to_dict()["gpu_smoke"] == {"runner": ["self-hosted", "gfx1151"], "required": True}
    assert Job.from_dict(strix.to_dict()) == strix  # inputs.json keeps it
    plan = NightPlan(inputs=None, inputs_path=tmp_path / "inputs.json", jobs=(strix, rdna3))  # type: ignore[arg-type]
    assert plan.gpu_matrix() == {
        "include": [
            {"id": "linux-gfx1151", "gpu_runner": ["self-hosted", "gfx1151"], "gpu_required": True},
            {"id": "linux-gfx110X", "gpu_runner": ["rdna3-box"], "gpu_required": False},
        ]
    }
    assert all(j.gpu_runner == () for j in load_matrix(None, families))  # the default matrix has no GPU runner yet


@pytest.mark.parametrize(
    "entry, pattern",
    [
        ("gpu_smoke: {runner: 5}", r"gpu_smoke\.runner must be a runner label or a list of labels"),
        ("gpu_smoke: {runner: [x], required: maybe}", r"gpu_smoke\.required"),
        ("gpu_smoke: {runners: [x]}", r"runners"),
    ],
)
def test_gpu_smoke_errors_name_file_and_line(write, families, entry, pattern):
    path = write("m.yaml", f"options:\n  {entry}\nmatrix: {{os: [linux], target: [gfx1151]}}\n")
    with pytest.raises(ConfigError, match=pattern):
        load_matrix(path, families)


def test_runner_smoke_is_gate_unless_the_matrix_says_informational_and_reaches_the_legs(write, families):
    """Issue 29: every Windows leg runs the gated CPU smoke; `runner_smoke: informational` marks an asset that cannot
    start on a driverless runner. It reaches the GitHub matrix (matrix.runner_smoke) and survives inputs.json."""
    from rockbuild.matrix import github_matrix

    path = write(
        "m.yaml",
        """
        matrix:
          os: [windows]
          target: [gfx1151, gfx110X]
          include:
            - {os: windows, target: gfx110X, runner_smoke: informational}
        """,
    )
    jobs = {j.id: j for j in load_matrix(path, families)}
    assert (jobs["windows-gfx1151"].runner_smoke, jobs["windows-gfx110X"].runner_smoke) == ("gate", "informational")
    entries = {e["id"]: e for e in github_matrix(list(jobs.values()))["include"]}
    assert entries["windows-gfx110X"]["runner_smoke"] == "informational"
    assert Job.from_dict(jobs["windows-gfx110X"].to_dict()) == jobs["windows-gfx110X"]
    older = {k: v for k, v in jobs["windows-gfx1151"].to_dict().items() if k != "runner_smoke"}
    assert Job.from_dict(older).runner_smoke == "gate"  # an inputs.json written before the key
    # the shipped matrix gates every Linux leg and the Windows Vulkan one; a Windows ROCm asset's runner smoke is
    # recorded, not gated, until a night shows that TheRock's HIP runtime starts without AMD's driver
    shipped = load_matrix(None, families)
    assert {j.runner_smoke for j in shipped if j.os == "linux"} == {"gate"}
    assert {(j.backend, j.runner_smoke) for j in shipped if j.os == "windows"} == {
        ("rocm", "informational"),
        ("vulkan", "gate"),
        ("cpu", "gate"),
    }
    bad = write("bad.yaml", "options:\n  runner_smoke: informationl\nmatrix: {os: [linux], target: [gfx1151]}\n")
    with pytest.raises(
        ConfigError,
        match=r"bad.yaml:2: options.runner_smoke must be gate or informational, not "
        r"'informationl'.*did you mean",
    ):
        load_matrix(bad, families)


def test_required_when_proven_is_optional_until_the_plan_promotes_it(tmp_path):
    from rockbuild.settings import Settings

    path = tmp_path / "m.yaml"
    path.write_text(
        "matrix:\n  os: [linux]\n  target: [gfx1151, gfx1152]\n  include:\n"
        "    - {target: gfx1152, required: when-proven}\n"
    )
    jobs = {j.id: j for j in Settings.from_environment({}).but(matrix_file=path).jobs()}
    assert (jobs["linux-gfx1152"].required, jobs["linux-gfx1152"].when_proven) == (False, True)
    assert (jobs["linux-gfx1151"].required, jobs["linux-gfx1151"].when_proven) == (True, False)
    path.write_text(
        "matrix:\n  os: [linux]\n  target: [gfx1151]\n  include:\n    - {target: gfx1151, required: maybe}\n"
    )
    with pytest.raises(
        ConfigError, match=r"m.yaml:5: include.required must be true, false or when-proven, not 'maybe'"
    ):
        Settings.from_environment({}).but(matrix_file=path).jobs()


def test_an_os_override_keeps_the_jobs_includes_add_for_that_os():
    from rockbuild.settings import Settings

    settings = Settings.from_environment({})
    linux = [j.id for j in settings.jobs(os_override=["linux"])]
    assert {"linux-gfx942", "linux-gfx1151+gfx120X", "linux-gfx125X", "linux-vulkan"} <= set(linux)
    assert all(i.startswith("linux-") for i in linux)
    assert [j.id for j in settings.jobs(os_override=["linux"], target_override=["gfx1151"])] == [
        "linux-common",
        "linux-gfx1151",
    ]


# --- the common part (docs/common-part.md) ------------------------------------------------------------------------


def test_common_part_adds_one_cpu_job_per_os_and_wires_the_gpu_jobs_to_it(write, families):
    path = write(
        "common.yaml",
        """
        options:
          common_part: true
          cmake: {GGML_SCHED_MAX_COPIES: "4"}
        matrix:
          os: [linux, windows]
          target: [gfx1151, gfx110X]
          include:
            - {os: linux, backend: vulkan}
            - {os: linux, target: gfx110X, cmake: {GGML_HIP_UMA: "ON"}}
            - {os: windows, target: gfx110X, common_part: false}
            - {os: linux, backend: cpu}
        """,
    )
    jobs = load_matrix(path, families)
    by_id = {j.id: j for j in jobs}
    assert [j.id for j in jobs[:2]] == ["linux-common", "windows-common"]  # first: a night builds them before
    common = by_id["linux-common"]
    assert (common.backend, common.name, common.required, common.targets, common.cmake) == (
        "cpu",
        "common",
        False,
        (),
        (("GGML_SCHED_MAX_COPIES", "4"),),
    )
    assert common.common_for == ("linux-gfx1151", "linux-vulkan") and by_id["windows-common"].common_for == (
        "windows-gfx1151",
    )
    assert by_id["linux-gfx1151"].common == "linux-common" and by_id["linux-vulkan"].common == "linux-common"
    # other cmake (it reaches ggml), an opt-out, and a backend with no library of its own: built whole
    assert by_id["linux-gfx110X"].common == by_id["windows-gfx110X"].common == by_id["linux-cpu"].common == ""
    assert Job.from_dict(common.to_dict()) == common
    # a selection brings the common part along; GitHub's build legs leave it to a leg of its own
    assert [j.id for j in select_jobs(jobs, ["linux-vulkan"])] == ["linux-common", "linux-vulkan"]
    assert [j.id for j in select_jobs(jobs, ["linux-gfx110X"])] == ["linux-gfx110X"]
    without = write("plain.yaml", "matrix: {os: [linux], target: [gfx1151]}\n")
    assert [(j.id, j.common) for j in load_matrix(without, families)] == [("linux-gfx1151", "")]  # off by default
    bad = write("bad.yaml", "options:\n  common_part: yes please\nmatrix: {os: [linux], target: [gfx1151]}\n")
    with pytest.raises(ConfigError, match=r"bad.yaml:2: options.common_part must be true or false, not 'yes please'"):
        load_matrix(bad, families)
