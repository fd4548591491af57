"""The proof that a pruned fat binary lost only other GPU targets' code: its record in bundle.json, checked again
by the audit, and once more against the ROCm root's originals with the root's clang-offload-bundler."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rockbuild.bundle.fatbin import elf_identity, file_sha256, find_offload_tools, identity_differences, verify_pruned
from rockbuild.core.errors import BundleError
from rockbuild.core.records import BundleRecord
from rockbuild.core.vocabulary import Check
from rockbuild.paths import inside
from rockbuild.rocm.layout import detect_layout


def pruning_proof(root: Path, record: BundleRecord | None) -> tuple[list[str], list[str], list[dict[str, Any]]]:
    """The failures, warnings and per-file details of the pruned fat binaries bundle.json lists (``pruned_fatbins``).

    Each must carry its independent check (:func:`rockbuild.bundle.fatbin.verify_pruned`: LLVM's tools from the ROCm
    root listed the original's host entry and job targets in every bundle and unbundled byte-identical code objects;
    SONAME, NEEDED, dynamic symbols and the other sections unchanged), passed; and be the very file that was checked
    (its sha256) with the original's dynamic identity (read again here). A pruned library without the record is
    "not verified": a failure, never a pass. A bundle whose fat binaries were left whole says why, as a warning."""
    failures: list[str] = []
    warnings: list[str] = []
    details: list[dict[str, Any]] = []
    if record is None:
        return failures, warnings, details
    pruning = record.fatbin_pruning
    if pruning is not None and pruning.done is False and pruning.libraries:
        warnings.append(
            f"fat binaries not pruned ({', '.join(pruning.libraries)} ship every GPU target): {pruning.reason}"
        )
    for entry in record.pruned_fatbins:
        name = entry.file
        proof = entry.verification
        path = root / name
        if proof is None:
            failures.append(
                f"{name} was pruned but not verified by an independent tool (not verified): bundle it "
                "again from its ROCm root"
            )
            details.append({"file": name, "verified": False, "summary": "pruned, NOT VERIFIED"})
            continue
        problems = list(proof.failures)
        if not proof.ok:
            problems = problems or ["its independent check did not pass"]
        elif not path.is_file():
            problems = [f"{name} is listed as pruned but is not in the bundle"]
        else:
            try:
                if file_sha256(path) != proof.sha256:
                    problems.append(f"{name} changed since it was verified (sha256 differs)")
                problems += [f"{name}: {d}" for d in identity_differences(dict(proof.identity), elf_identity(path))]
            except (OSError, BundleError) as exc:
                problems.append(f"{name} cannot be read: {getattr(exc, 'message', None) or exc}")
        failures += problems[:5] + ([f"{name}: {len(problems) - 5} more"] if len(problems) > 5 else [])
        tools = proof.tools
        tool = f"{Path(str(tools.get('bundler', 'clang-offload-bundler'))).name} ({tools.get('version', '?')})"
        summary = (
            f"pruned to {', '.join(proof.kept_targets) or 'nothing'}; {tool}: "
            f"{proof.code_objects} code objects in {proof.bundles} bundles byte-identical "
            f"to the original's ({proof.code_object_bytes:,} bytes); SONAME, NEEDED, dynamic "
            f"symbols and other sections unchanged; {proof.cross_check}"
        )
        details.append(
            {
                "file": name,
                "verified": not problems,
                "tool": tool,
                "original": proof.original,
                "bundles": proof.bundles,
                "code_objects": proof.code_objects,
                "kept_targets": list(proof.kept_targets),
                "sha256": proof.sha256,
                "summary": summary if not problems else f"pruned, check FAILED: {problems[0]}",
            }
        )
    return failures, warnings, details


def reverify_pruned(
    root: Path, record: BundleRecord, targets: Sequence[str], rocm: Path
) -> tuple[list[str], list[str]]:
    """Run the independent check again for each pruned fat binary, with the clang-offload-bundler of the ROCm root
    ``rocm`` (the one the bundle was made from, given by the user: a tool named in bundle.json is never run) against
    the original in that root (the same bytes, by sha256): (failures, one note per file)."""
    layout = detect_layout(rocm)
    tools, why = find_offload_tools(layout)
    if tools is None:
        return [f"cannot check the pruned fat binaries again: {why}"], []
    failures: list[str] = []
    notes: list[str] = []
    base = Path(rocm).absolute()
    for entry in record.pruned_fatbins:
        name, proof = entry.file, entry.verification
        if proof is None or not proof.ok or not (root / name).is_file():
            continue  # pruning_proof fails it already
        recorded = Path(proof.original)
        candidates = [recorded]
        if layout.sysroot is not None and recorded.is_absolute():  # recorded inside the chroot: /usr/lib/...
            candidates.append(layout.sysroot / recorded.relative_to("/"))
        original = next((c for c in candidates if c.is_file() and inside(Path(os.path.realpath(c)), base)), None)
        if original is None:
            failures.append(f"cannot check {name} again: its original {recorded} is not in {rocm}")
        elif file_sha256(original) != proof.original_sha256:
            failures.append(
                f"cannot check {name} again: {original} is not the original it was pruned from (sha256 differs)"
            )
        else:
            again = verify_pruned(original, root / name, targets, tools)
            failures += [f"checked again: {f}" for f in again.failures[:5]]
            notes.append(
                f"{name}: checked again now with {tools.bundler.name} against {original}: "
                f"{'passed' if again.ok else 'FAILED'} ({again.code_objects} code objects, "
                f"{again.seconds:.1f} s)"
            )
    return failures, notes


def with_pruning_proof(check: Check, root: Path, record: BundleRecord | None) -> Check:
    """``check`` (the backend's ``code-objects``) with :func:`pruning_proof`'s failures, warnings and details."""
    failures, warnings, details = pruning_proof(root, record)
    if not failures and not warnings and not details:
        return check
    return Check(
        check.name,
        check.ok and not failures,
        check.failures + tuple(failures),
        check.warnings + tuple(warnings),
        {**check.details, "pruned": details},
    )
