"""Everything rockbuild takes from outside its command line, read in one place and resolved once.

:class:`Settings` is made at the CLI's entry (:meth:`Settings.from_environment`) from the environment, the data files
shipped in ``matrices/`` and the flags that replace them, then passed down: no other module of rockbuild reads
``os.environ`` or loads a YAML file. The data files are parsed the first time a stage asks for them (``rockbuild
--help`` reads none), by the parser of the module that owns their meaning (:func:`rockbuild.config.parse_families`,
:func:`rockbuild.bundle.policy.parse_policy`, ...); a broken file is a one-line ConfigError naming file and line.

Secrets (``GITHUB_TOKEN``/``GH_TOKEN``, ``HF_TOKEN``) are kept here for the one call that needs each; they are never
part of a ``repr``, a log or a child's environment (:func:`rockbuild.process.child_env` drops them).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml

from .config import YDict, YList, data_path
from .errors import ConfigError

if TYPE_CHECKING:
    from .bundle.policy import BundlePolicy
    from .config import FamilyTable, Job
    from .dllsearch import WindowsHost
    from .publish.config import PublishConfig
    from .rocm.index import Channel

T = TypeVar("T")

# ---------------------------------------------------------------------------------------------------------------------
# The process's environment and platform


def environment() -> dict[str, str]:
    """A copy of this process's environment: what :class:`Settings` and the children's allowlist start from."""
    return dict(os.environ)


def host_os() -> str:
    """``linux`` or ``windows``: the OS whose jobs this machine builds and whose bundles it runs."""
    return "windows" if sys.platform.startswith("win") else "linux"


def default_cache(env: Mapping[str, str]) -> Path:
    """Where tarballs, ROCm roots, clones and models are kept: $ROCKBUILD_CACHE, else $XDG_CACHE_HOME/rockbuild."""
    explicit = env.get("ROCKBUILD_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = env.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "rockbuild"


def _flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() not in ("", "0", "false", "no")


# ---------------------------------------------------------------------------------------------------------------------
# YAML that remembers where each value came from, so errors can name file and line.


class _LineLoader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> YDict:
    loader.flatten_mapping(node)
    result = YDict()
    result.line = node.start_mark.line + 1
    result.lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str | int | float | bool) and key is not None:
            raise ConfigError(f"{loader.name}:{key_node.start_mark.line + 1}: mapping keys must be plain scalars")
        if key in result:
            raise ConfigError(f"{loader.name}:{key_node.start_mark.line + 1}: duplicate key {key!r}")
        result[key] = loader.construct_object(value_node, deep=True)
        result.lines[key] = key_node.start_mark.line + 1
    return result


def _construct_sequence(loader: _LineLoader, node: yaml.SequenceNode) -> YList:
    result = YList(loader.construct_object(child, deep=True) for child in node.value)
    result.line = node.start_mark.line + 1
    result.lines = [child.start_mark.line + 1 for child in node.value]
    return result


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)


MAX_YAML_DEPTH = 32  # the deepest real file (a matrix's options.cmake) nests 4 levels


def _depth(root: yaml.Node) -> tuple[int, yaml.Node]:
    """How deep ``root`` nests (a scalar is 1) and its deepest node, without recursion."""
    best, deepest = 0, root
    todo: list[tuple[yaml.Node, int]] = [(root, 1)]
    seen: set[int] = set()
    while todo:
        node, level = todo.pop()
        if id(node) in seen:  # an alias points back at a node already counted
            continue
        seen.add(id(node))
        if level > best:
            best, deepest = level, node
        if isinstance(node, yaml.SequenceNode):
            todo.extend((child, level + 1) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            todo.extend((value, level + 1) for _, value in node.value)
    return best, deepest


def load_yaml(path: Path) -> Any:
    """Parse a YAML file into YDict/YList values; any problem is a one-line ConfigError with file and line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    loader = _LineLoader(text)
    loader.name = str(path)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        depth, deepest = _depth(node)
        if depth > MAX_YAML_DEPTH:
            raise ConfigError(f"{path}:{deepest.start_mark.line + 1}: nested {depth} levels deep; "
                              f"a configuration file may nest at most {MAX_YAML_DEPTH}")
        return loader.construct_document(node)
    except RecursionError:  # the composer recurses once per level: say what it is, not where Python gave up
        raise ConfigError(f"{path}: nested too deeply to read; a configuration file may nest at most "
                          f"{MAX_YAML_DEPTH} levels") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        what = " ".join(filter(None, [exc.context, exc.problem]))
        raise ConfigError(f"{path}{line}: invalid YAML: {what}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from None
    finally:
        loader.dispose()


# ---------------------------------------------------------------------------------------------------------------------
# The data files, each parsed by the module that owns its meaning


def _load_data_file(path: Path | None, shipped: str, parse: Callable[[Any, Path], T]) -> T:
    """``parse`` of the YAML file at ``path``, by default the one shipped as ``matrices/<shipped>``."""
    path = path or data_path("matrices", shipped)
    return parse(load_yaml(path), path)


def load_families(path: Path | None = None) -> FamilyTable:
    from .config import parse_families

    return _load_data_file(path, "families.yaml", parse_families)


def load_policy(path: Path | None = None) -> BundlePolicy:
    """The bundle policy (default: the shipped ``matrices/bundle-policy.yaml``)."""
    from .bundle.policy import parse_policy

    return _load_data_file(path, "bundle-policy.yaml", parse_policy)


def load_smoke_config(path: Path | None = None) -> dict[str, Any]:
    from .model import parse_smoke_config

    return _load_data_file(path, "smoke.yaml", parse_smoke_config)


def load_publish_config(path: Path | None = None) -> PublishConfig:
    from .publish.config import parse_publish_config

    return _load_data_file(path, "publish.yaml", parse_publish_config)


def load_channels(path: Path | None = None) -> dict[str, Channel]:
    """The ROCm channels (default: the shipped ``matrices/rocm-channels.yaml``)."""
    from .rocm.index import parse_channels

    return _load_data_file(path, "rocm-channels.yaml", parse_channels)


def load_matrix(
    path: Path | None = None,
    families: FamilyTable | None = None,
    *,
    os_override: Sequence[str] = (),
    target_override: Sequence[str] = (),
) -> list[Job]:
    """The jobs of a matrix file (default: the shipped ``matrices/nightly.yaml``); see
    :func:`rockbuild.matrix.expand_matrix`."""
    from .matrix import expand_matrix

    return _load_data_file(path, "nightly.yaml", lambda doc, where: expand_matrix(
        doc, where, families or load_families(), os_override=os_override, target_override=target_override))


# ---------------------------------------------------------------------------------------------------------------------
# The settings


@dataclass(frozen=True)
class GitHubContext:
    """What GitHub Actions tells a step through its environment (all None/False elsewhere)."""

    actions: bool = False  # GITHUB_ACTIONS=true: log folds, annotations
    repository: str | None = None  # GITHUB_REPOSITORY, the default --repo
    token: str | None = field(default=None, repr=False)  # GITHUB_TOKEN, else GH_TOKEN
    step_summary: Path | None = None  # GITHUB_STEP_SUMMARY
    output: Path | None = None  # GITHUB_OUTPUT
    run_url: str | None = None  # this run's page, from GITHUB_SERVER_URL/GITHUB_REPOSITORY/GITHUB_RUN_ID

    @classmethod
    def from_environment(cls, env: Mapping[str, str]) -> GitHubContext:
        def path(name: str) -> Path | None:
            value = env.get(name, "").strip()
            return Path(value) if value else None

        repository = env.get("GITHUB_REPOSITORY", "").strip() or None
        server, run_id = env.get("GITHUB_SERVER_URL", "").strip(), env.get("GITHUB_RUN_ID", "").strip()
        token = next((env[n].strip() for n in ("GITHUB_TOKEN", "GH_TOKEN") if env.get(n, "").strip()), None)
        return cls(
            actions=env.get("GITHUB_ACTIONS") == "true", repository=repository, token=token,
            step_summary=path("GITHUB_STEP_SUMMARY"), output=path("GITHUB_OUTPUT"),
            run_url=f"{server}/{repository}/actions/runs/{run_id}" if server and repository and run_id else None,
        )


@dataclass(frozen=True)
class Settings:
    """Everything from outside the command line, resolved once and passed down. Data files load on first use."""

    env: Mapping[str, str] = field(repr=False)  # what children's environments are picked from (never whole)
    cache: Path
    host_os: str
    debug: bool = False
    ci: bool = False  # $CI: no progress bars, no prompts
    github: GitHubContext = field(default_factory=GitHubContext)
    hf_endpoint: str = "https://huggingface.co"
    hf_token: str | None = field(default=None, repr=False)
    source_date_epoch: int | None = None  # SOURCE_DATE_EPOCH: archive timestamps
    matrix_file: Path | None = None  # -c FILE; None: the shipped matrices/nightly.yaml
    families_file: Path | None = None
    policy_file: Path | None = None  # --policy FILE
    smoke_file: Path | None = None
    publish_file: Path | None = None  # --publish-config FILE
    channels_file: Path | None = None
    windows: WindowsHost | None = None  # on Windows: SystemRoot and PATH, where the DLL loader looks (doctor, install)

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None, **flags: Any) -> Settings:
        """Settings from ``env`` (default: this process's environment); ``flags`` (cache=..., policy_file=...,
        debug=...) replace what the environment or the shipped files would give, as command-line flags do."""
        env = environment() if env is None else dict(env)
        epoch = env.get("SOURCE_DATE_EPOCH", "").strip()
        if epoch and not epoch.isdigit():
            raise ConfigError(f"SOURCE_DATE_EPOCH={epoch!r} is not a number of seconds since 1970")
        values: dict[str, Any] = dict(
            env=env, cache=default_cache(env), host_os=host_os(), debug=_flag(env, "ROCKBUILD_DEBUG"),
            ci=_flag(env, "CI"), github=GitHubContext.from_environment(env),
            hf_endpoint=(env.get("HF_ENDPOINT", "").strip() or "https://huggingface.co").rstrip("/"),
            hf_token=env.get("HF_TOKEN", "").strip() or None, source_date_epoch=int(epoch) if epoch else None,
        )
        values.update({k: v for k, v in flags.items() if v is not None})
        if values["host_os"] == "windows" and values.get("windows") is None:
            from .dllsearch import WindowsHost

            values["windows"] = WindowsHost.from_environment(env)
        return cls(**values)

    def but(self, **changes: Any) -> Settings:
        """A copy with ``changes`` (None values are ignored, as for an absent flag)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    @cached_property
    def families(self) -> FamilyTable:
        return load_families(self.families_file)

    @cached_property
    def policy(self) -> BundlePolicy:
        return load_policy(self.policy_file)

    @cached_property
    def smoke(self) -> dict[str, Any]:
        return load_smoke_config(self.smoke_file)

    @cached_property
    def publish(self) -> PublishConfig:
        return load_publish_config(self.publish_file)

    @cached_property
    def channels(self) -> dict[str, Channel]:
        return load_channels(self.channels_file)

    def jobs(self, *, os_override: Sequence[str] = (), target_override: Sequence[str] = ()) -> list[Job]:
        """The jobs of the matrix file (-c, else the shipped one), with the dispatch inputs' axes."""
        return load_matrix(self.matrix_file, self.families, os_override=os_override,
                           target_override=target_override)
