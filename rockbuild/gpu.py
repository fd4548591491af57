"""The one reader of the KFD topology: which AMD GPUs the amdgpu kernel driver exposes, read from sysfs files, never
from ROCm. The smoke test, doctor and install ask it, so they always agree about which GPUs exist.

Reading ``/sys/class/kfd/kfd/topology/nodes/N/properties`` (one ``key value`` per line):

* ``gfx_target_version`` is ``major * 10000 + minor * 100 + stepping`` in decimal; the gfx name prints minor and
  stepping as one hex digit each (90010 -> gfx90a, 90402 -> gfx942, 100306 -> gfx1036, 110501 -> gfx1151). CPU
  nodes have 0 (or ``simd_count`` 0) and are skipped.
* ROCm numbers GPUs in node order, CPU nodes left out: that order is the index ``HIP_VISIBLE_DEVICES`` takes.
* Integrated or discrete: sysfs has no flag for it (ROCm asks the amdgpu driver through an ioctl,
  ``AMDGPU_IDS_FLAGS_FUSION``). The rule here: a GPU node that also reports CPU cores (how an APU's CRAT table may
  describe one combined node) is integrated, and so is a GPU whose gfx target only exists as an APU
  (:data:`APU_TARGETS`). gfx942 is both MI300A (APU) and MI300X (discrete), so it counts as integrated only by the
  first rule.
"""

from __future__ import annotations

from pathlib import Path

from rockbuild.core.jobs import FamilyTable
from rockbuild.core.vocabulary import Gpu

# gfx targets that only exist as the GPU of an APU (the family table's products: iGPUs, Strix, Krackan).
APU_TARGETS = frozenset(
    {"gfx90c", "gfx1033", "gfx1035", "gfx1036", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153"}
)


def gfx_name(version: int) -> str:
    """The gfx target of a KFD ``gfx_target_version``: 110501 -> gfx1151, 90010 -> gfx90a."""
    major, minor, stepping = version // 10000, (version // 100) % 100, version % 100
    return f"gfx{major}{minor:x}{stepping:x}"


def read_properties(path: Path) -> dict[str, int]:
    """A KFD ``properties`` file as {key: int}; lines that are not ``key integer`` are skipped."""
    out: dict[str, int] = {}
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = int(parts[1])
            except ValueError:
                continue
    return out


def kfd_nodes_dir(sysfs_root: Path) -> Path:
    return sysfs_root / "class" / "kfd" / "kfd" / "topology" / "nodes"


def _products(table: FamilyTable | None, target: str) -> str:
    if table is None:
        return ""
    for fam in table.families:
        if fam.resolve_targets and fam.gpus.get(target):
            return fam.gpus[target]
    return ""


def read_kfd_gpus(sysfs_root: Path = Path("/sys"), table: FamilyTable | None = None) -> list[Gpu]:
    """The GPUs of the KFD topology under ``sysfs_root``, in ROCm's device order (see the module docstring)."""
    return gpus_in_topology(kfd_nodes_dir(sysfs_root), table)


def gpus_in_topology(nodes: Path, table: FamilyTable | None = None) -> list[Gpu]:
    """The GPUs of a KFD topology's ``nodes`` folder (``table`` names their products)."""
    try:
        names = sorted((p for p in nodes.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    except OSError:
        return []
    gpus: list[Gpu] = []
    for node_dir in names:
        props = read_properties(node_dir / "properties")
        version = props.get("gfx_target_version", 0)
        if not version or not props.get("simd_count", 0):
            continue  # a CPU node
        target = gfx_name(version)
        if props.get("cpu_cores_count", 0) > 0:
            integrated, reason = True, "the KFD node reports CPU cores and SIMDs (an APU)"
        elif target in APU_TARGETS:
            integrated, reason = True, f"{target} only exists as an APU's GPU"
        else:
            integrated, reason = False, "no CPU cores in its KFD node and not an APU-only target"
        mem = 0
        banks = node_dir / "mem_banks"
        if banks.is_dir():
            for bank in banks.iterdir():
                mem += read_properties(bank / "properties").get("size_in_bytes", 0)
        simd_per_cu = props.get("simd_per_cu") or 2
        minor = props.get("drm_render_minor")
        gpus.append(
            Gpu(
                index=len(gpus),
                node=int(node_dir.name),
                target=target,
                products=_products(table, target),
                integrated=integrated,
                integrated_reason=reason,
                compute_units=props["simd_count"] // simd_per_cu,
                simd_count=props["simd_count"],
                device_id=props.get("device_id", 0),
                drm_render_minor=minor if minor else None,
                local_mem_bytes=mem,
            )
        )
    return gpus
