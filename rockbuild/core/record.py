"""The engine of rockbuild's typed records: a frozen dataclass whose fields are a JSON object's keys.

Every file rockbuild writes and reads back (build.json, smoke.json, manifest.json, a matrix's job...) and every
command's ``--json`` is a :class:`Record` subclass, mostly in :mod:`rockbuild.core.records`. :meth:`Record.to_dict`
and :meth:`Record.write` write one; :meth:`Record.from_dict`, :meth:`Record.loads` and :meth:`Record.read` read one
and reject what is malformed with one :class:`~rockbuild.core.errors.RecordError` line naming the file and the key
path. A field's annotation is what its key must hold; its metadata can change its JSON form (:func:`json_form`,
``DATE``, ``HEX``, ``SECONDS``, :func:`written`), its key (:func:`json_key`) or inline a nested record (``INLINE``).

docs/architecture.md ("Records") explains the rules and why this converter rather than pydantic or msgspec."""

from __future__ import annotations

import dataclasses
import datetime
import json
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar, get_args, get_origin

from rockbuild.core.data import write_json_atomic
from rockbuild.core.errors import RecordError

R = TypeVar("R", bound="Record")

# ---------------------------------------------------------------------------------------------------------------------
# The engine: a record's fields are its keys; their annotations say what each must be.

_JSON_NAMES = {
    str: "a string",
    Path: "a path (a string)",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def _what(value: Any) -> str:
    """The JSON name of ``value``'s type, for messages."""
    return {
        dict: "object",
        list: "array",
        str: "string",
        bool: "boolean",
        int: "int",
        float: "number",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def _describe(tp: Any) -> str:
    origin = get_origin(tp)
    if tp is Any:
        return "any value"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in get_args(tp))
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    if origin in (tuple, list):
        return "an array"
    if origin in (dict, Mapping) or tp in (dict, Mapping) or origin is typing.Mapping:  # noqa: UP006
        return "an object"
    if isinstance(tp, type) and issubclass(tp, Record):
        return "an object"
    return _JSON_NAMES.get(tp, str(tp))


def _join(where: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{where}[{key}]"
    return f"{where}.{key}" if where else key


class _Wrong(Exception):
    """A value of the wrong type at ``where`` (turned into a RecordError naming the source)."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(message)
        self.where = where
        self.message = message


def _convert(tp: Any, value: Any, where: str, source: str) -> Any:
    """``value`` as ``tp`` (a record class, a union, tuple[X, ...], Mapping[str, X], a scalar, a Path, Any)."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin is typing.Literal:  # a closed set: one of its values
        if value in get_args(tp) and type(value) in {type(a) for a in get_args(tp)}:
            return value
        shown = repr(value) if isinstance(value, str | int | float) and not isinstance(value, bool) else _what(value)
        raise _Wrong(where, f"{where or 'the file'} must be {_describe(tp)}, not {shown}")
    if origin in (typing.Union, types.UnionType):
        options = get_args(tp)
        if value is None and type(None) in options:
            return None
        for option in options:
            if option is type(None):
                continue
            try:
                return _convert(option, value, where, source)
            except _Wrong as exc:
                if exc.where != where or len(options) == 2:
                    raise
        raise _Wrong(where, f"{where or 'the file'} must be {_describe(tp)}, not {_what(value)}")
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise _Wrong(where, f"{where} must be an array, not {_what(value)}")
        item = get_args(tp)[0]
        return tuple(_convert(item, v, _join(where, i), source) for i, v in enumerate(value))
    if origin in (dict, Mapping) or origin is typing.Mapping or tp in (dict, Mapping):  # noqa: UP006
        if not isinstance(value, dict):
            raise _Wrong(where, f"{where} must be an object, not {_what(value)}")
        args = get_args(tp)
        item = args[1] if args else Any
        return {str(k): _convert(item, v, _join(where, str(k)), source) for k, v in value.items()}
    if isinstance(tp, type) and issubclass(tp, Record):
        return tp._load(value, where, source)
    if tp is Path:  # a path is a string in JSON
        if isinstance(value, str):
            return Path(value)
        if isinstance(value, Path):
            return value
    elif tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif isinstance(tp, type) and isinstance(value, tp):
        return value
    raise _Wrong(where, f"{where or 'the file'} must be {_describe(tp)}, not {_what(value)}")


def _dump(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, tuple | list):
        return [_dump(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _dump(v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value


_HINTS: dict[type, dict[str, Any]] = {}
_SPOTS: dict[type, dict[str, dataclasses.Field[Any]]] = {}
_FORM = "rockbuild.json_form"
_KEY = "rockbuild.json_key"
_INLINE = "rockbuild.inline"


@dataclass(frozen=True)
class JsonForm:
    """A field whose JSON form differs from its Python value: ``json_type`` is the JSON's annotation (checked on read,
    and what its schema says), ``read`` makes the checked JSON into the field's value, ``write`` the reverse."""

    json_type: Any
    read: Callable[[Any], Any]
    write: Callable[[Any], Any]


def json_form(json_type: Any, read: Callable[[Any], Any], write: Callable[[Any], Any]) -> dict[str, JsonForm]:
    """``field(metadata=json_form(...))``: a field whose JSON form differs from its Python value."""
    return {_FORM: JsonForm(json_type, read, write)}


def form_of(f: dataclasses.Field[Any]) -> JsonForm | None:
    """The JSON form of a record's field, when it has its own (for schema writers)."""
    form = f.metadata.get(_FORM)
    return form if isinstance(form, JsonForm) else None


def json_key(key: str) -> dict[str, str]:
    """``field(metadata=json_key("from"))``: a field written and read under another key than its name."""
    return {_KEY: key}


def key_of(f: dataclasses.Field[Any]) -> str:
    """The JSON key of a record's field: its name, or the one ``json_key`` gave it."""
    return str(f.metadata.get(_KEY, f.name))


def _never_read(value: Any) -> Any:
    raise ValueError("is written by a report and never read back")


def written(write: Callable[[Any], Any]) -> dict[str, JsonForm]:
    """``field(metadata=written(...))``: a report's field whose value is no record (a release's files, a job folder's
    outcome); ``write`` makes its JSON (or the records it is written as). A report is written, not read: reading one
    back refuses the field."""
    return json_form(Any, _never_read, write)


INLINE = {_INLINE: True}
"""A nested record written as this object's own keys, where the field stands, and read back from them (``rocm
list``'s entry: its tarball name's keys, then its url)."""


PAIRS = json_form(Mapping[str, str], lambda value: tuple(value.items()), lambda pairs: dict(pairs))
"""An ordered tuple of (name, text) pairs in Python, an object in JSON (the matrix's cmake definitions)."""


def _day(text: str | None) -> datetime.date | None:
    if text is None:
        return None
    try:
        return datetime.date.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is no date (YYYY-MM-DD)") from None


DATE = json_form(str | None, _day, lambda day: day.isoformat() if day is not None else None)
"""A day (or None) in Python, an ISO date string (``2026-04-27``, or null) in JSON."""

HEX = json_form(str, lambda text: int(text, 16), lambda number: f"0x{number:04x}")
"""A number in Python, hexadecimal in JSON (a PCI device id: ``0x1586``)."""

SECONDS = json_form(float, float, lambda seconds: round(seconds, 3))
"""A duration in seconds, written to the millisecond (a report's ``seconds``)."""


@dataclass(frozen=True)
class Record:
    """A JSON object with typed keys: each dataclass field is a key (a field without a default is required).

    ``extra`` keeps the keys the record does not know; ``keys`` the order of the keys read (``to_dict`` writes them
    back in that order; a record made in code writes its fields in their order)."""

    FILE: ClassVar[str] = ""  # the file's name, for messages ("build.json")
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False, kw_only=True, hash=False)
    keys: tuple[str, ...] = field(default=(), compare=False, repr=False, kw_only=True)

    @classmethod
    def _fields(cls) -> list[dataclasses.Field[Any]]:
        return [f for f in dataclasses.fields(cls) if f.name not in ("extra", "keys")]

    @classmethod
    def _inputs(cls) -> list[dataclasses.Field[Any]]:
        """The fields read from a file (a derived field, ``init=False``, is only written)."""
        return [f for f in cls._fields() if f.init]

    @classmethod
    def _hints(cls) -> dict[str, Any]:
        hints = _HINTS.get(cls)
        if hints is None:
            hints = _HINTS[cls] = typing.get_type_hints(cls)
        return hints

    @classmethod
    def _inline(cls, f: dataclasses.Field[Any]) -> type[Record] | None:
        """The record class of an INLINE field (None: a field of its own key)."""
        if not f.metadata.get(_INLINE):
            return None
        tp = cls._hints()[f.name]
        if not (isinstance(tp, type) and issubclass(tp, Record)):
            raise TypeError(f"{cls.__name__}.{f.name} is INLINE but not a record")
        return tp

    @classmethod
    def _spots(cls) -> dict[str, dataclasses.Field[Any]]:
        """Each JSON key, in the fields' order, and the field that writes it (an INLINE record's keys: that field)."""
        spots = _SPOTS.get(cls)
        if spots is None:
            spots = {}
            for f in cls._fields():
                inline = cls._inline(f)
                spots.update(dict.fromkeys(inline._spots(), f) if inline is not None else {key_of(f): f})
            _SPOTS[cls] = spots
        return spots

    @classmethod
    def _load(cls: type[R], data: Any, where: str, source: str) -> R:
        if not isinstance(data, dict):
            raise _Wrong(where, f"{where or 'the file'} must be an object, not {_what(data)}")
        hints = cls._hints()
        values: dict[str, Any] = {}
        known: set[str] = set()
        for f in cls._fields():
            inline = cls._inline(f)
            if inline is not None:  # its keys are this object's
                own = inline._spots()
                known.update(own)
                if f.init:
                    values[f.name] = inline._load({k: v for k, v in data.items() if k in own}, where, source)
                continue
            key = key_of(f)
            known.add(key)
            if not f.init:
                continue
            if key not in data:
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    raise _Wrong(_join(where, key), f"{_join(where, key)} is missing")
                continue
            form = form_of(f)
            if form is None:
                values[f.name] = _convert(hints[f.name], data[key], _join(where, key), source)
            else:
                checked = _convert(form.json_type, data[key], _join(where, key), source)
                try:
                    values[f.name] = form.read(checked)
                except ValueError as exc:  # a value of the right JSON type that the form refuses (a date)
                    raise _Wrong(_join(where, key), f"{_join(where, key)}: {exc}") from None
        extra = {k: v for k, v in data.items() if k not in known}
        return cls(**values, extra=extra, keys=tuple(data))

    @classmethod
    def from_dict(cls: type[R], data: Any, source: str | Path | None = None) -> R:
        """The record of ``data`` (a file's JSON value); a RecordError names ``source`` and the key when malformed."""
        name = str(source) if source is not None else cls.FILE
        try:
            return cls._load(data, "", name)
        except _Wrong as exc:
            raise RecordError(
                f"{name}: {exc.message}",
                hint=f"{cls.FILE or 'the file'} was not written by this rockbuild, or was damaged; write it again",
            ) from None

    @classmethod
    def loads(cls: type[R], text: str, source: str | Path | None = None) -> R:
        """The record of a JSON text (a file, a release asset)."""
        name = str(source) if source is not None else cls.FILE
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise RecordError(
                f"{name}: not valid JSON ({exc})",
                hint=f"{cls.FILE or 'the file'} is truncated or is not JSON; write it again",
            ) from None
        return cls.from_dict(data, name)

    @classmethod
    def read(cls: type[R], path: Path) -> R | None:
        """The record in ``path``; None when there is no such file, a RecordError when it is malformed."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise RecordError(f"{path}: cannot be read ({exc})") from None
        return cls.loads(text, path)

    @classmethod
    def keyed(cls: type[R], values: Mapping[str, Any]) -> R:
        """A record made in code whose JSON has ``values``' keys alone, in their order: for an object whose keys
        depend on what happened (a smoke run has a ``load`` only when it loaded a model, a ``log_tail`` only when it
        failed). A key the record has no field for is kept (``extra``)."""
        names = {key_of(f): f.name for f in cls._inputs()}
        return cls(
            **{names[k]: v for k, v in values.items() if k in names},
            extra={k: v for k, v in values.items() if k not in names},
            keys=tuple(values),
        )

    def to_dict(self) -> dict[str, Any]:
        spots = self._spots()  # JSON key -> the field that writes it
        order = [k for k in self.keys if k in spots or k in self.extra] if self.keys else list(spots)
        order += [k for k, f in spots.items() if k not in order and (not self.keys or self._set(f.name))]
        order += [k for k in self.extra if k not in order]
        inline = {f.name for f in self._fields() if self._inline(f) is not None}
        done: set[str] = set()
        out: dict[str, Any] = {}
        for k in order:
            f = spots.get(k)
            if f is None:
                out[k] = _dump(self.extra[k])
            elif f.name in inline:  # at its first key, the nested record's keys, as it writes them
                if f.name not in done:
                    done.add(f.name)
                    out.update(getattr(self, f.name).to_dict())
            elif (form := form_of(f)) is not None:
                out[k] = _dump(form.write(getattr(self, f.name)))  # (a form may make records: written as such)
            else:
                out[k] = _dump(getattr(self, f.name))
        return out

    def _set(self, name: str) -> bool:
        """A field a record read from a file did not have, set since (replace()): written too."""
        f = next(f for f in self._fields() if f.name == name)
        if not f.init:
            return True  # derived: always written
        default = (
            f.default
            if f.default is not dataclasses.MISSING
            else (f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING)
        )
        return bool(getattr(self, name) != default)

    def narrow(self, base: type[R]) -> R:
        """This record as ``base``, a class it derives from: the fields ``base`` has (inputs.json's job, a Job with
        its ROCm key, as the Job)."""
        if not isinstance(self, base):
            raise TypeError(f"{type(self).__name__} is not a {base.__name__}")
        return base(**{f.name: getattr(self, f.name) for f in base._inputs()})

    def write(self, path: Path, *, ensure_ascii: bool = True) -> Path:
        """Write the record to ``path`` atomically (readers see the old file or the new one)."""
        return write_json_atomic(Path(path), self.to_dict(), ensure_ascii=ensure_ascii)
