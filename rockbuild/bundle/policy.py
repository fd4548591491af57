"""The bundle policy (``config/bundle-policy.yaml``) as typed values: never-ship rules, dlopen extras, kernel data.

Policy is data: which libraries stay on the host and why, which dlopen'ed files a closure cannot see, where kernel
folders go. This module only reads and matches it.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rockbuild import console
from rockbuild.core.data import YDict, YList, check_keys, expect_type, load_data_file, where
from rockbuild.core.errors import ConfigError
from rockbuild.core.record import Record, json_form, json_key

PLATFORMS = ("linux", "windows")
LAYOUT_KINDS = ("therock", "opt-rocm", "debian")


def name_matches(name: str, patterns: Iterable[str], *, platform: str) -> bool:
    """Does a file name match one of the globs? Windows names compare case-insensitively, as its loader does."""
    if platform == "windows":
        return any(fnmatch.fnmatchcase(name.lower(), p.lower()) for p in patterns)
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


@dataclass(frozen=True)
class SystemRule(Record):
    """Libraries that never ship: they come from the host."""

    names: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class Extra(Record):
    """Files loaded with dlopen/LoadLibrary that no DT_NEEDED or import names."""

    names: tuple[str, ...]
    when: tuple[str, ...]
    required: bool
    reason: str
    rocm_major: tuple[int, ...] = ()
    kinds: tuple[str, ...] = ()
    store_as: str | None = field(default=None, metadata=json_key("as"))
    # ship only when a shipped library matching `when` names it (its bytes hold the extra's name, as a dlopen or
    # DT_NEEDED string does): a rocBLAS built without hipBLASLt support never loads it
    only_if_named: bool = False

    @property
    def stems(self) -> tuple[bytes, ...]:
        """What a library that loads this extra holds: its names without the glob, ``lib`` and suffix parts
        (``libhipblaslt.so*`` -> ``hipblaslt``)."""
        out = []
        for name in self.names:
            stem = re.split(r"[*?\[]", name, maxsplit=1)[0].lower()
            stem = stem.removeprefix("lib").split(".so", 1)[0].removesuffix(".dll")
            if len(stem) >= 4:
                out.append(stem.encode())
        return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class KernelRule(Record):
    """Where one component's kernel folder goes in the bundle, and which shipped library makes it needed."""

    component: str
    dest: str
    used_by: tuple[str, ...]
    reason: str


# (machine, variants) pairs in Python (hashable, as the policy's cache wants), an object of lists in JSON
_VARIANT_PAIRS = json_form(
    dict[str, tuple[str, ...]],
    lambda value: tuple((m, tuple(v)) for m, v in value.items()),
    lambda pairs: {m: list(v) for m, v in pairs},
)


@dataclass(frozen=True, kw_only=True)
class PlatformPolicy(Record):
    """One platform's part of the bundle policy (config/bundle-policy.yaml's ``linux`` or ``windows``)."""

    platform: str
    rpath_tag: str = field(default="RPATH", metadata=json_key("rpath"))  # linux only: RPATH or RUNPATH
    system: tuple[SystemRule, ...]
    extras: tuple[Extra, ...]
    kernel_data: tuple[KernelRule, ...]
    # GGML_CPU_ALL_VARIANTS: per machine (x86_64, aarch64), the CPU backend modules a bundle must ship, baseline first
    cpu_variants: tuple[tuple[str, tuple[str, ...]], ...] = field(default=(), metadata=_VARIANT_PAIRS)

    def cpu_variants_for(self, machine: str) -> tuple[str, ...]:
        """The CPU variants of ``machine`` (uname -m, or the ELF/PE machine name: x64, EM_X86_64, AMD64)."""
        key = {
            "x64": "x86_64",
            "amd64": "x86_64",
            "em_x86_64": "x86_64",
            "arm64": "aarch64",
            "em_aarch64": "aarch64",
        }.get(machine.lower(), machine.lower())
        return dict(self.cpu_variants).get(key, ())

    def system_reason(self, name: str) -> str | None:
        """Why ``name`` never ships (None: it is not a system library)."""
        return _system_reason(self, name)

    def extras_for(self, rocm_major: int | None, kind: str | None) -> tuple[Extra, ...]:
        """The extras that apply to a ROCm root of this major version and layout kind.

        A major newer than any the policy names gets the newest one's entries (with a warning): a new ROCm usually
        keeps what the previous one dlopen'ed, and the closure plus the audit catch the rest.
        """
        majors = sorted({m for e in self.extras for m in e.rocm_major})
        effective = rocm_major
        if rocm_major is not None and majors and rocm_major > majors[-1]:
            console.warn(
                f"the bundle policy names no extras for ROCm {rocm_major}; using those of ROCm {majors[-1]} "
                "(update config/bundle-policy.yaml)"
            )
            effective = majors[-1]
        return tuple(
            e
            for e in self.extras
            if (not e.rocm_major or effective is None or effective in e.rocm_major)
            and (not e.kinds or kind is None or kind in e.kinds)
        )

    def kernel_rule(self, component: str) -> KernelRule | None:
        return next((k for k in self.kernel_data if k.component == component), None)


@functools.lru_cache(maxsize=4096)
def _system_reason(policy: PlatformPolicy, name: str) -> str | None:
    # asked for every DT_NEEDED entry of every file: cached per name
    for rule in policy.system:
        if name_matches(name, rule.names, platform=policy.platform):
            return rule.reason
    return None


@dataclass(frozen=True)
class BundlePolicy:
    source: str
    linux: PlatformPolicy
    windows: PlatformPolicy

    def for_platform(self, platform: str) -> PlatformPolicy:
        return self.windows if platform == "windows" else self.linux


def _strings(path: Path, parent: Any, key: str, value: Any, what: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    expect_type(path, parent, key, value, list, what)
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item:
            raise ConfigError(f"{where(path, value, i)}: {what} must hold non-empty strings, not {item!r}")
    return tuple(value)


def _reason(path: Path, node: YDict, what: str) -> str:
    reason = node.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise ConfigError(f"{where(path, node)}: {what} needs a 'reason' (why it is there, for the next reader)")
    return " ".join(reason.split())


def _system_rules(path: Path, parent: YDict, key: str) -> tuple[SystemRule, ...]:
    rules = parent.get(key, YList())
    expect_type(path, parent, key, rules, list, f"'{key}'")
    out = []
    for i, rule in enumerate(rules):
        expect_type(path, rules, i, rule, YDict, f"{key}[{i}]")
        check_keys(path, rule, ["names", "reason"], f"a {key} rule")
        out.append(
            SystemRule(
                _strings(path, rule, "names", rule.get("names"), f"{key}[{i}].names"),
                _reason(path, rule, f"{key}[{i}]"),
            )
        )
    return tuple(out)


def _extras(path: Path, parent: YDict) -> tuple[Extra, ...]:
    extras = parent.get("extras", YList())
    expect_type(path, parent, "extras", extras, list, "'extras'")
    out = []
    for i, entry in enumerate(extras):
        expect_type(path, extras, i, entry, YDict, f"extras[{i}]")
        check_keys(
            path,
            entry,
            ["names", "when", "required", "reason", "rocm_major", "kinds", "as", "only_if_named"],
            "an extra",
        )
        only_if_named = entry.get("only_if_named", False)
        expect_type(path, entry, "only_if_named", only_if_named, bool, f"extras[{i}].only_if_named")
        if only_if_named and not entry.get("when"):
            raise ConfigError(
                f"{where(path, entry, 'only_if_named')}: only_if_named needs 'when' (the libraries that name it)"
            )
        majors = entry.get("rocm_major", YList())
        expect_type(path, entry, "rocm_major", majors, list, f"extras[{i}].rocm_major")
        if not all(isinstance(m, int) and not isinstance(m, bool) for m in majors):
            raise ConfigError(f"{where(path, entry, 'rocm_major')}: rocm_major must list whole numbers (7, 10)")
        kinds = _strings(path, entry, "kinds", entry.get("kinds", YList()), f"extras[{i}].kinds")
        for kind in kinds:
            if kind not in LAYOUT_KINDS:
                raise ConfigError(
                    f"{where(path, entry, 'kinds')}: unknown layout kind {kind!r}; allowed: {', '.join(LAYOUT_KINDS)}"
                )
        required = entry.get("required", False)
        expect_type(path, entry, "required", required, bool, f"extras[{i}].required")
        store_as = entry.get("as")
        if store_as is not None and (not isinstance(store_as, str) or "/" in store_as or not store_as):
            raise ConfigError(f"{where(path, entry, 'as')}: 'as' must be a plain file name")
        out.append(
            Extra(
                names=_strings(path, entry, "names", entry.get("names"), f"extras[{i}].names"),
                when=_strings(path, entry, "when", entry.get("when", YList()), f"extras[{i}].when"),
                required=required,
                reason=_reason(path, entry, f"extras[{i}]"),
                rocm_major=tuple(majors),
                kinds=kinds,
                store_as=store_as,
                only_if_named=only_if_named,
            )
        )
    return tuple(out)


def _kernel_rules(path: Path, parent: YDict) -> tuple[KernelRule, ...]:
    rules = parent.get("kernel_data", YDict())
    expect_type(path, parent, "kernel_data", rules, YDict, "'kernel_data'")
    out = []
    for component, body in rules.items():
        expect_type(path, rules, component, body, YDict, f"kernel_data.{component}")
        check_keys(path, body, ["dest", "used_by", "reason"], f"kernel_data.{component}")
        dest = body.get("dest")
        if not isinstance(dest, str) or not dest or dest.startswith("/") or ".." in Path(dest).parts:
            raise ConfigError(f"{where(path, body, 'dest')}: dest must be a relative path inside the bundle")
        out.append(
            KernelRule(
                str(component),
                dest,
                _strings(path, body, "used_by", body.get("used_by"), f"kernel_data.{component}.used_by"),
                _reason(path, body, f"kernel_data.{component}"),
            )
        )
    return tuple(out)


def _cpu_variants(path: Path, parent: YDict) -> tuple[tuple[str, tuple[str, ...]], ...]:
    body = parent.get("cpu_variants", YDict())
    expect_type(path, parent, "cpu_variants", body, YDict, "'cpu_variants'")
    check_keys(path, body, ["machines", "reason"], "'cpu_variants'")
    if body:
        _reason(path, body, "cpu_variants")
    machines = body.get("machines", YDict())
    expect_type(path, body, "machines", machines, YDict, "cpu_variants.machines")
    out = {}
    for machine, names in machines.items():
        variants = _strings(path, machines, machine, names, f"cpu_variants.machines.{machine}")
        bad = [v for v in variants if not re.fullmatch(r"[a-z0-9_.]+", v)]
        if bad:
            raise ConfigError(f"{where(path, machines, machine)}: {bad[0]!r} is not a CPU variant name (x64, zen4)")
        out[str(machine)] = variants
    return tuple(out.items())


def parse_policy(doc: Any, path: Path) -> BundlePolicy:
    """The bundle policy from a parsed ``bundle-policy.yaml`` (read by :func:`load_policy`);
    ConfigError names file:line."""
    if not isinstance(doc, YDict):
        raise ConfigError(f"{where(path, doc)}: expected a mapping with 'linux' and 'windows'")
    check_keys(path, doc, ["format", *PLATFORMS], "the bundle policy")
    if doc.get("format", 1) != 1:
        raise ConfigError(f"{where(path, doc, 'format')}: unsupported policy format {doc.get('format')!r} (want 1)")
    platforms = {}
    for platform in PLATFORMS:
        body = doc.get(platform, YDict())
        expect_type(path, doc, platform, body, YDict, f"'{platform}'")
        if platform == "linux":
            check_keys(
                path, body, ["rpath", "rpath_reason", "never_ship", "extras", "kernel_data", "cpu_variants"], "'linux'"
            )
            tag = body.get("rpath", "RPATH")
            if tag not in ("RPATH", "RUNPATH"):
                raise ConfigError(f"{where(path, body, 'rpath')}: rpath must be RPATH or RUNPATH, not {tag!r}")
            system = _system_rules(path, body, "never_ship")
        else:
            check_keys(path, body, ["system", "extras", "kernel_data", "cpu_variants"], "'windows'")
            tag = "RPATH"
            system = _system_rules(path, body, "system")
        platforms[platform] = PlatformPolicy(
            platform=platform,
            rpath_tag=tag,
            system=system,
            extras=_extras(path, body),
            kernel_data=_kernel_rules(path, body),
            cpu_variants=_cpu_variants(path, body),
        )
    return BundlePolicy(str(path), platforms["linux"], platforms["windows"])


def load_policy(path: Path | None = None) -> BundlePolicy:
    """The bundle policy (default: the shipped ``config/bundle-policy.yaml``)."""
    return load_data_file(path, "bundle-policy.yaml", parse_policy)
