"""Mixed-GPU jobs (a target list: ``target: [gfx1151, gfx1201]``, job ``linux-gfx1151+gfx1201``) through every stage
that sees them: the matrix (ids, names, union of targets, the tarball group, errors with file:line), the build's
GPU_TARGETS, the fetch of TheRock's multiarch tarball from a local index, a bundle of a ``.kpack/`` tree pruned to
exactly both targets, the asset name, and ``rockbuild install`` choosing the mixed asset. Also the family table's
``source`` (where TheRock publishes each family from) and the default matrix's new jobs."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
from support.bundles import run_clean, tree_files
from support.faultserver import FaultServer
from support.index import index_page
from support.kpack import FOUR, MIXED, POLICY, kpack_tree, offload_tool
from support.options import context
from support.tarballs import therock_like_tarball

from rockbuild.backends import REGISTRY
from rockbuild.core.errors import ConfigError, UsageError
from rockbuild.core.jobs import Family, FamilyTable, load_families
from rockbuild.matrix import load_matrix


@pytest.fixture(scope="module")
def families():
    return load_families()


def expand(write, families, text: str, name: str = "m.yaml"):
    return load_matrix(write(name, textwrap.dedent(text)), families)


# ------------------------------------------------------------------------------------------------ matrix


def test_a_nested_target_list_is_one_job_per_os_with_the_union_of_its_targets(write, families):
    jobs = expand(
        write,
        families,
        """
        matrix:
          os: [linux, windows]
          target: [gfx1151, [gfx1151, gfx1201]]
    """,
    )
    by_id = {j.id: j for j in jobs}
    assert list(by_id) == ["linux-gfx1151", "linux-gfx1151+gfx1201", "windows-gfx1151", "windows-gfx1151+gfx1201"]
    mixed = by_id["linux-gfx1151+gfx1201"]
    assert (mixed.name, mixed.family, mixed.group, mixed.legacy_groups) == (
        "gfx1151+gfx1201",
        "multiarch",
        "multiarch",
        (),
    )
    assert mixed.targets == ("gfx1151", "gfx1201") and mixed.gpu_targets == "gfx1151;gfx1201"
    assert by_id["windows-gfx1151+gfx1201"].group == "multiarch"
    assert by_id["linux-gfx1151"].group == "gfx1151"  # the plain job keeps its own family's tarball


def test_members_may_be_families_in_the_order_written_and_deduplicated(write, families):
    jobs = expand(
        write,
        families,
        """
        matrix:
          os: [linux]
          target: [[gfx120X, gfx1151], [gfx1201, gfx1200], [gfx110X, gfx1150+gfx1151]]
    """,
    )
    assert [(j.id, j.targets, j.group) for j in jobs] == [
        ("linux-gfx120X+gfx1151", ("gfx1200", "gfx1201", "gfx1151"), "multiarch"),
        # both members from one family: that family's tarball, as for a plain job
        ("linux-gfx1201+gfx1200", ("gfx1201", "gfx1200"), "gfx120X-all"),
        # a member joined by "+" is the same as its parts in the list
        (
            "linux-gfx110X+gfx1150+gfx1151",
            ("gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151"),
            "multiarch",
        ),
    ]


def test_a_list_of_one_is_the_element_and_an_include_list_adds_or_matches_a_job(write, families):
    jobs = expand(
        write,
        families,
        """
        matrix:
          os: [linux, windows]
          target: [[gfx1151], gfx1100]
          include:
            - {os: linux, target: [gfx1151, gfx1201], required: false}
            - {target: [gfx1151], cmake: {GGML_HIP_ROCWMMA_FATTN: "ON"}}
            - {os: linux, target: [gfx1151, gfx1201], llama_ref: b7000}
    """,
    )
    by_id = {j.id: j for j in jobs}
    assert list(by_id) == [
        "linux-gfx1151",
        "linux-gfx1100",
        "windows-gfx1151",
        "windows-gfx1100",
        "linux-gfx1151+gfx1201",
    ]
    assert by_id["linux-gfx1151"].targets == ("gfx1151",) and by_id["linux-gfx1151"].group == "gfx1151"
    assert dict(by_id["windows-gfx1151"].cmake) == {"GGML_HIP_ROCWMMA_FATTN": "ON"}
    mixed = by_id["linux-gfx1151+gfx1201"]  # added by the first include, options from the third that matched it
    assert (mixed.required, mixed.llama_ref, mixed.cmake) == (False, "b7000", ())


def test_an_exclude_list_removes_the_mixed_job(write, families):
    jobs = expand(
        write,
        families,
        """
        matrix:
          os: [linux, windows]
          target: [[gfx1151, gfx1201]]
          exclude:
            - {os: windows, target: [gfx1151, gfx1201]}
    """,
    )
    assert [j.id for j in jobs] == ["linux-gfx1151+gfx1201"]


def test_the_same_mix_written_twice_is_a_duplicate_job(write, families):
    with pytest.raises(ConfigError, match=r"m\.yaml:3: job linux-gfx1151\+gfx1201 is defined twice"):
        expand(
            write,
            families,
            """
            matrix:
              os: [linux]
              target: [[gfx1151, gfx1201], gfx1151+gfx1201]
        """,
        )


@pytest.mark.parametrize(
    "text,pattern",
    [
        # empty list: the line of the list
        (
            "matrix:\n  os: [linux]\n  target:\n    - gfx1151\n    - []\n",
            r"/m\.yaml:5: an empty target list builds nothing",
        ),
        # a member with a typo: that member's own line, with the suggestion
        (
            "matrix:\n  os: [linux]\n  target:\n    - - gfx1151\n      - gfx1210\n",
            r"/m\.yaml:5: unknown GPU family or target 'gfx1210' \(did you mean .*gfx1201",
        ),
        # a member that adds nothing: its own line, naming the member that already builds it
        (
            "matrix:\n  os: [linux]\n  target:\n    - - gfx120X\n      - gfx1201\n",
            r"/m\.yaml:5: gfx1201 adds no target to \[gfx120X, gfx1201\]: gfx120X already builds gfx1201; drop it",
        ),
        (
            "matrix:\n  os: [linux]\n  target: [[gfx1151, gfx1151]]\n",
            r"/m\.yaml:3: gfx1151 adds no target to \[gfx1151, gfx1151\]",
        ),
        # a member TheRock does not publish for the OS (gfx942 on Windows): the exclude that fixes it
        (
            "matrix:\n  os: [linux, windows]\n  target:\n    - [gfx1151, gfx942]\n",
            r"/m\.yaml:4: gfx942 \(in \[gfx1151, gfx942\]\) cannot be built for windows: TheRock publishes no windows "
            r"tarball for gfx94X-dcgpu; exclude \{os: windows, target: \[gfx1151, gfx942\]\}",
        ),
        (
            "matrix:\n  os: [linux]\n  target: [gfx1151]\n  include:\n    - {os: windows, target: [gfx125X, gfx1151]}\n",
            r"/m\.yaml:5: gfx125X \(in \[gfx125X, gfx1151\]\) cannot be built for windows",
        ),
        # a list inside a list
        (
            "matrix:\n  os: [linux]\n  target:\n    - - gfx1151\n      - [gfx1201]\n",
            r"/m\.yaml:5: a member of a target list is a family or gfx name, not a list",
        ),
    ],
)
def test_target_list_errors_name_file_and_line(write, families, text, pattern):
    with pytest.raises(ConfigError, match=pattern) as info:
        load_matrix(write("m.yaml", text), families)
    assert "\n" not in str(info.value)


def test_a_family_table_without_a_carrier_of_every_target_says_so():
    def fam(name, targets, group):
        return Family(name, name, targets, dict.fromkeys(targets, ""), {"linux": group, "windows": group}, (), (), True)

    table = FamilyTable((fam("gfx1151", ("gfx1151",), "gfx1151"), fam("gfx1201", ("gfx1201",), "gfx120X-all")))
    with pytest.raises(
        ConfigError,
        match=r"^m\.yaml:3: no TheRock tarball in the family table carries all of "
        r"gfx1151, gfx1201; .*multiarch",
    ):
        table.select_many(["gfx1151", "gfx1201"], where="m.yaml:3")
    assert table.select("gfx1151").members == ()


def test_cli_target_override_and_build_resolve_a_mix(run_rockbuild):
    from support.options import resolve_job

    job = resolve_job(target="gfx1151+gfx1201", os_name="linux")
    assert (job.id, job.targets, job.group) == ("linux-gfx1151+gfx1201", ("gfx1151", "gfx1201"), "multiarch")
    with pytest.raises(UsageError, match=r"several joined by '\+'"):
        resolve_job(target="gfx1151+gfx120X")
    result = run_rockbuild("matrix", "--target", "gfx1151+gfx1201,gfx1151", "--os", "linux", "--format", "json")
    assert result.returncode == 0, result.stderr
    assert [(j["id"], j["targets"], j["group"]) for j in json.loads(result.stdout)] == [
        ("linux-common", [], ""),
        ("linux-gfx1151+gfx1201", ["gfx1151", "gfx1201"], "multiarch"),
        ("linux-gfx1151", ["gfx1151"], "gfx1151"),
    ]
    only = run_rockbuild("matrix", "--only", "*+*", "--format", "json")
    assert [j["id"] for j in json.loads(only.stdout)] == [
        "linux-common",
        "windows-common",
        "linux-gfx1151+gfx120X",
        "windows-gfx1151+gfx120X",
    ]


def test_gpu_targets_of_a_mixed_build_are_all_its_targets(tmp_path):
    from support.options import resolve_job
    from support.trees import therock_tree

    from rockbuild.backends import get_backend
    from rockbuild.backends.rocm import toolchain_from_layout
    from rockbuild.rocm.layout import detect_layout

    job = resolve_job(target="gfx1151+gfx1201", os_name="linux")
    toolchain = toolchain_from_layout(detect_layout(therock_tree(tmp_path / "r")))
    defs = dict(get_backend("rocm").cmake_definitions(job, toolchain, offline=True, build_info={}, ccache=False))
    assert defs["GPU_TARGETS"] == "gfx1151;gfx1201" and defs["GGML_HIP"] == "ON"


# ------------------------------------------------------------------------------------------------ the default matrix


def test_the_default_matrix_adds_strix_halo_plus_rdna4_and_the_asked_for_targets():
    from rockbuild.settings import Settings

    jobs = {j.id: j for j in Settings.from_environment().jobs()}
    for os_name in ("linux", "windows"):
        mixed = jobs[f"{os_name}-gfx1151+gfx120X"]
        assert (mixed.targets, mixed.group, mixed.family, mixed.required) == (
            ("gfx1151", "gfx1200", "gfx1201"),
            "multiarch",
            "multiarch",
            False,
        )
    assert (jobs["linux-gfx125X"].targets, jobs["linux-gfx125X"].group) == (("gfx1250",), "gfx125X-dcgpu")
    assert "windows-gfx125X" not in jobs  # TheRock publishes no Windows tarball for it
    for os_name in ("linux", "windows"):
        assert (jobs[f"{os_name}-gfx906"].group, jobs[f"{os_name}-gfx906"].required) == ("gfx906", False)
    assert not jobs["linux-gfx125X"].required
    # the jobs of before are unchanged
    assert jobs["linux-gfx1151"].required and jobs["linux-gfx120X"].targets == ("gfx1200", "gfx1201")


# ------------------------------------------------------------------------------------------------ family sources


def test_every_shipped_family_says_where_it_comes_from(families):
    by_name = {f.name: f for f in families.families}
    assert all(f.source is not None for f in families.families)
    assert str(by_name["gfx125X-dcgpu"].source) == "TheRock#5744, since 2026-06-16"
    assert str(by_name["gfx906"].source) == "TheRock#2869, since 2026-02-25"
    assert by_name["multiarch"].source.to_dict() == {"ref": "TheRock#4871", "since": "2026-04-27"}
    assert by_name["gfx94X-dcgpu"].source.since is None
    assert "date not recorded" in str(by_name["gfx94X-dcgpu"].source)
    assert by_name["gfx125X-dcgpu"].groups == {"linux": "gfx125X-dcgpu", "windows": None}
    assert by_name["gfx906"].groups == {"linux": "gfx906", "windows": "gfx906"}


FAMILY = """
families:
  gfx1151:
    targets: {gfx1151: Strix Halo}
    groups: {linux: gfx1151, windows: gfx1151}
"""


@pytest.mark.parametrize(
    "source,pattern",
    [
        ("", r"families\.yaml:3: family 'gfx1151' needs a 'source' \(\{ref: TheRock#N"),
        ("    source: TheRock#1\n", r"families\.yaml:5: gfx1151\.source .* must be a mapping"),
        (
            "    source: {ref: 'see the wiki', since: 2026-01-01}\n",
            r"families\.yaml:5: gfx1151\.source\.ref must be a TheRock issue \(TheRock#5744\) or a file",
        ),
        ("    source: {ref: TheRock#1}\n", r"families\.yaml:5: gfx1151\.source needs 'since'"),
        (
            "    source: {ref: TheRock#1, since: soon}\n",
            r"families\.yaml:5: gfx1151\.source\.since must be a date \(YYYY-MM-DD\) or null, not 'soon'",
        ),
        (
            "    source: {ref: TheRock#1, since: 2026-01-01, by: me}\n",
            r"families\.yaml:5: unknown key 'by' in gfx1151\.source",
        ),
    ],
)
def test_family_source_errors_name_file_and_line(write, source, pattern):
    with pytest.raises(ConfigError, match=pattern):
        load_families(write("families.yaml", FAMILY + source))


def test_family_sources_accept_a_file_and_a_null_date(write):
    table = load_families(
        write("families.yaml", FAMILY + "    source: {ref: cmake/therock_amdgpu_targets.cmake, since: null}\n")
    )
    assert str(table.families[0].source) == "cmake/therock_amdgpu_targets.cmake (date not recorded)"


def test_rockbuild_matrix_families_lists_groups_and_sources(run_rockbuild):
    table = run_rockbuild("matrix", "--families", "--wide")  # every column, whatever COLUMNS the caller has
    assert table.returncode == 0, table.stderr
    assert "TheRock#5744, since 2026-06-16" in table.stdout and "gfx125X-dcgpu" in table.stdout
    data = json.loads(run_rockbuild("matrix", "--families", "--format", "json").stdout)
    gfx906 = next(f for f in data if f["name"] == "gfx906")
    assert gfx906["source"] == {"ref": "TheRock#2869", "since": "2026-02-25"}
    assert gfx906["groups"] == {"linux": "gfx906", "windows": "gfx906"}


# ------------------------------------------------------------------------------------------------ fetch


KPACK = {f".kpack/blas_lib_{t}.kpack": t.encode() * 10 for t in ("gfx1100", "gfx1151", "gfx1200", "gfx1201")}


def test_fetch_picks_the_multiarch_tarball_for_a_mixed_job_from_a_local_index(tmp_path, run_rockbuild):
    from support.options import resolve_job

    from rockbuild.rocm.fetch import fetch_rocm, job_groups

    names = {g: f"therock-dist-linux-{g}-10.2.0a20261128.tar.gz" for g in ("gfx1151", "gfx120X-all", "multiarch")}
    (tmp_path / "src").mkdir()
    with FaultServer() as srv:
        for group, name in names.items():
            files = {**KPACK, ".kpack/blas_lib.kpm": b"manifest"} if group == "multiarch" else None
            srv.add(name, therock_like_tarball(tmp_path / "src" / name, files=files).read_bytes())
        srv.add_text(
            "index.html", index_page([*names.values(), "therock-dist-linux-multiarch-tests-10.2.0a20261128.tar.gz"])
        )
        job = resolve_job(target="gfx1151+gfx1201", os_name="linux")
        fetched = fetch_rocm(
            job_groups(job), os_name="linux", index_url=srv.url_for("index.html"), cache=tmp_path / "cache"
        )
        assert (fetched.name, fetched.group) == (names["multiarch"], "multiarch")
        assert srv.stats(names["gfx1151"]).requests == 0 and srv.stats(names["gfx120X-all"]).requests == 0
        assert fetched.layout is not None
        assert {"gfx1151", "gfx1201"} <= set(fetched.layout.targets_of("kpack"))
        # the CLI's --family takes the same mix
        cli = run_rockbuild(
            "fetch",
            "--family",
            "gfx1151+gfx1201",
            "--os",
            "linux",
            "--index-url",
            srv.url_for("index.html"),
            "--cache",
            str(tmp_path / "cache"),
            "--json",
        )
        assert cli.returncode == 0, cli.stderr
        assert json.loads(cli.stdout)["name"] == names["multiarch"]


# ------------------------------------------------------------------------------------------------ bundle


@pytest.fixture(scope="module")
def mixed_bundle(tmp_path_factory):
    from support.bundles import make_bundle

    from rockbuild.bundle.policy import load_policy
    from rockbuild.rocm.layout import detect_layout

    base = tmp_path_factory.mktemp("mixed")
    tree = kpack_tree(base / "tree")
    offload_tool(tree["rocm"] / "lib" / "llvm" / "bin")
    policy_file = base / "policy.yaml"
    policy_file.write_text(POLICY)
    out = base / "bundle"
    report = make_bundle(tree["build"], detect_layout(tree["rocm"]), list(MIXED), out, policy=load_policy(policy_file))
    return tree, report, out


def test_a_kpack_tree_bundles_to_exactly_the_two_targets(mixed_bundle):
    from rockbuild.bundle.fatbin import read_fatbin
    from rockbuild.rocm.layout import kernel_file_target

    tree, report, out = mixed_bundle
    assert report.audit is not None and report.audit.ok, report.audit.failures
    assert read_fatbin(out / "libggml-hip.so.0").targets == MIXED
    assert read_fatbin(tree["lib"] / "librocblas.so.5.0").targets == tuple(FOUR)  # the root's is untouched
    assert read_fatbin(out / "librocblas.so.5").targets == MIXED  # pruned, two families kept
    (pruned,) = report.pruned
    assert pruned.verification is not None and pruned.verification.ok
    assert pruned.verification.kept_targets == MIXED
    files = tree_files(out)
    assert [f for f in files if f.startswith(".kpack/")] == [
        ".kpack/blas_lib.kpm",
        ".kpack/blas_lib_gfx1151.kpack",
        ".kpack/blas_lib_gfx1201.kpack",
    ]
    kernel_targets = {kernel_file_target(Path(f).name) for f in files if "/" in f} - {None}
    assert kernel_targets == set(MIXED)
    assert "rocblas/library/TensileLibrary_lazy_gfx1201.dat" in files
    assert "rocblas/library/TensileLibrary_lazy_gfx1200.dat" not in files
    data = json.loads((out / "bundle.json").read_text())
    assert data["targets"] == list(MIXED)
    kpack = next(f for f in data["kernels"]["folders"] if f["dest"] == ".kpack")
    assert (kpack["kept"]["files"], kpack["dropped"]["files"]) == (3, 2)
    assert set(kpack["per_target"]) == set(MIXED)
    assert run_clean(out / "app").stdout == "base=1 hip=47 comgr=7 plug=-1\n"  # the pruned rocBLAS loads


def test_the_audit_holds_the_mixed_bundle_to_both_targets(mixed_bundle):
    from rockbuild.bundle.audit import audit_bundle

    _, _, out = mixed_bundle
    assert audit_bundle(out, backends=REGISTRY).ok  # the targets from bundle.json
    one = audit_bundle(out, ["gfx1151"], backends=REGISTRY)
    assert not one.ok
    (failure,) = one.check("code-objects").failures[:1]
    assert "libggml-hip.so.0 has device code for gfx1151, gfx1201: also has gfx1201" in failure
    assert any("also carries files for gfx1201" in w for w in one.check("kernel-data").warnings)
    three = audit_bundle(out, [*MIXED, "gfx1200"], backends=REGISTRY)
    assert not three.ok and any("lacks gfx1200" in f for f in three.check("code-objects").failures)
    assert any("no kernel files for gfx1200" in f for f in three.check("kernel-data").failures)


def test_a_mixed_target_missing_from_the_tree_is_an_error(tmp_path):
    from support.bundles import make_bundle

    from rockbuild.bundle.policy import load_policy
    from rockbuild.core.errors import BundleError
    from rockbuild.rocm.layout import detect_layout

    tree = kpack_tree(tmp_path / "tree")
    for kpack in (tree["rocm"] / ".kpack").glob("*gfx1201*"):
        kpack.unlink()
    (tree["lib"] / "rocblas" / "library" / "TensileLibrary_lazy_gfx1201.dat").unlink()
    (tmp_path / "policy.yaml").write_text(POLICY)
    with pytest.raises(BundleError, match="has no files for gfx1201"):
        make_bundle(
            tree["build"],
            detect_layout(tree["rocm"]),
            list(MIXED),
            tmp_path / "b",
            policy=load_policy(tmp_path / "policy.yaml"),
            prune_fatbin=False,
        )


# ------------------------------------------------------------------------------------------------ publish, install


def test_the_asset_name_has_no_plus_and_is_what_install_matches():
    from support.publishing import config

    from rockbuild.install import asset_name_pattern
    from rockbuild.publish.jobs import BuiltJob
    from rockbuild.publish.release import asset_base

    cfg = config()
    for os_name, word in (("linux", "ubuntu"), ("windows", "windows")):
        job = BuiltJob(
            dir=None,
            id=f"{os_name}-gfx1151+gfx1201",
            os=os_name,
            name="gfx1151+gfx1201",
            targets=MIXED,
            required=False,
            status="ok",
        )
        base = asset_base(cfg, "b1234", job)
        assert base == f"llama-b1234-{word}-rocm-gfx1151-gfx1201-x64"
        match = asset_name_pattern(cfg.asset_name, tag="b1234", os_word=word, backend="rocm").fullmatch(base + ".zip")
        assert match and match["name"] == "gfx1151-gfx1201"
        plain = BuiltJob(
            dir=None,
            id=f"{os_name}-gfx1151",
            os=os_name,
            name="gfx1151",
            targets=("gfx1151",),
            required=True,
            status="ok",
        )
        assert asset_base(cfg, "b1234", plain) == f"llama-b1234-{word}-rocm-gfx1151-x64"


@pytest.fixture(scope="module")
def mixed_release(tmp_path_factory):
    from support.github import GitHubAPIServer
    from support.install import real_bundle
    from support.publishing import TOKEN, make_job

    from rockbuild.publish.release import PublishOptions, publish

    out = tmp_path_factory.mktemp("night") / "out"
    with GitHubAPIServer(token=TOKEN) as gh:
        jobs = []
        for job_id, targets in (("linux-gfx1151", ("gfx1151",)), ("linux-gfx1151+gfx1201", MIXED)):
            job = make_job(out, job_id, targets=targets, required=job_id == "linux-gfx1151")
            real_bundle(job / "bundle", targets)
            jobs.append(job)
        report = publish(
            PublishOptions(
                context=context(),
                job_dirs=tuple(jobs),
                repo=gh.full_name,
                api_url=gh.api_url,
                token=TOKEN,
                throttle=False,
                out=out.parent / "release",
            )
        )
        assert report.state == "published"
        yield gh, gh.state.release_by_tag(report.tag)


def test_install_chooses_the_mixed_asset_when_it_is_the_only_one_for_the_gpu(mixed_release, tmp_path):
    from support.install import options

    from rockbuild.install import install

    gh, release = mixed_release
    names = sorted(a.name for a in release.assets)
    tag = release.tag_name
    assert f"llama-{tag}-ubuntu-rocm-gfx1151-gfx1201-x64.tar.gz" in names
    assert not any("+" in n for n in names)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    rdna4 = install(options(gh, tmp_path / "a", target="gfx1201", os_name="linux"))
    assert rdna4.asset.name == f"llama-{tag}-ubuntu-rocm-gfx1151-gfx1201-x64.tar.gz"
    assert rdna4.asset.isas == MIXED and rdna4.asset.source == "manifest"
    assert os.access(rdna4.dest / "llama-server", os.X_OK)
    # the Strix Halo alone gets the smaller asset of its own
    halo = install(options(gh, tmp_path / "b", target="gfx1151", os_name="linux"))
    assert halo.asset.name == f"llama-{tag}-ubuntu-rocm-gfx1151-x64.tar.gz"
