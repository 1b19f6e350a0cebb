"""The format of a tip's record: everything the rest of the pack derives from one tip.

A record (:class:`Tip`) lives in its own module ``lightning_speedups/tips/tNN_slug.py`` and declares:

- its **card**: what it does, the seed tip, the expected gain, when it hurts;
- its **settings**: the ``speedups:`` keys it owns (:class:`Setting`), from which
  :class:`lightning_speedups.config.Speedups` is generated;
- how those settings become **Trainer arguments** (:attr:`Tip.trainer_kwargs`, before the Trainer
  exists) and **callbacks** (:attr:`Tip.callbacks`, each placed at an ``order`` in the callback list);
- its **bench variant** (:class:`BenchVariant`: the keys bench turns on and what the setup must have),
  or why bench never times it (:attr:`Tip.not_timed`);
- its **doctor check** (:attr:`Tip.check`: facts in, one finding out);
- its **shared-suite cases** (:class:`SuiteCase`), which ``tests/suite`` runs over several model kinds;
- its lint rules, by code.

Nothing central lists tips by hand: ``Speedups``, the callback list, the active-parts list, bench's
variants, the doctor's checks, the ``tips`` command and the README's parts table are generated from
the records (or tested against them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import Field, dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Optional, Union

from lightning_speedups.errors import SettingError

if TYPE_CHECKING:  # pragma: no cover - types only
    from lightning.pytorch.callbacks import Callback

    from lightning_speedups.inspection import Facts, Finding


#: A callback and its position in the callback list (lower runs first in every hook): ``(at("phase"), callback)``.
Placed = tuple[int, "Callback"]

#: Where each part sits in the callback list, in one table (a part's hooks run before those of the parts below it):
#: the flags deferred to the model and the start-up probe first; the batch size before the loaders are built;
#: model surgery before the optimizer exists (conv bias, layout, checkpointing, float8 linears, then compilation
#: over the result); the precision and kernel flags; the optimizer's kernels and the schedule over them; the
#: monitors after every part; the doctor's checks, the Safeguard that tries what the parts changed, the summary last.
PHASES: dict[str, int] = {
    "debug_mode": 0,
    "deferred_flags": 0,
    "auto_probe": 1,
    "effective_batch": 10,
    "largest_batch": 20,
    "loaders": 30,
    "device_normalize": 40,
    "conv_bias": 50,
    "channels_last": 60,
    "checkpointing": 70,
    "float8": 75,
    "compile": 80,
    "tf32": 90,
    "probed_precision": 91,
    "cudnn_benchmark": 100,
    "agc": 110,
    "optimizer": 120,
    "schedule_free": 125,
    "lr_schedule": 130,
    "data_wait": 200,
    "input_stats": 210,
    "non_blocking": 220,
    "storage": 230,
    "sync_guard": 240,
    "debug_tools": 250,
    "no_grad_eval": 251,
    "grads_to_none": 252,
    "advisor": 900,
    "safeguard": 950,
    "summary": 1000,
}


def at(phase: str) -> int:
    """The place of ``phase`` in the callback list (:data:`PHASES`); an unknown name is a bug of the pack."""
    return PHASES[phase]


#: ``(name, active, reason)``: one line of the start-up summary.
Note = tuple[str, bool, str]


@dataclass(frozen=True)
class Bounds:
    """The range of a number setting (``None``, a string such as ``auto`` and booleans are not numbers
    and pass). Declared on a :class:`Setting` (``bounds=``) or on a group field (:func:`bounded`).

    Examples:
        >>> Bounds(gt=0).problem(-1.0)
        'must be > 0'
        >>> Bounds(ge=0, lt=1).problem(0.5) is None
        True
    """

    gt: Optional[float] = None
    ge: Optional[float] = None
    lt: Optional[float] = None
    le: Optional[float] = None

    def problem(self, value: Any) -> Optional[str]:
        """What is wrong with ``value``, or with any number of a list (``None``: nothing)."""
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            if v != v or not (
                (self.gt is None or v > self.gt)
                and (self.ge is None or v >= self.ge)
                and (self.lt is None or v < self.lt)
                and (self.le is None or v <= self.le)
            ):
                return f"must be {self.text()}"
        return None

    def text(self) -> str:
        """``"> 0 and <= 1"``."""
        limits = ((">", self.gt), (">=", self.ge), ("<", self.lt), ("<=", self.le))
        return " and ".join(f"{sign} {limit:g}" for sign, limit in limits if limit is not None)


def bounded(default: Any = None, *, factory: Optional[Callable[[], Any]] = None, **limits: float) -> Any:
    """A group dataclass field whose numbers must lie in a range (:class:`Bounds` keywords: ``gt``, ``ge``,
    ``lt``, ``le``); the ``speedups:`` section checks it when it is built.

    Examples:
        >>> from dataclasses import dataclass, fields
        >>> @dataclass
        ... class S:
        ...     steps: int = bounded(10, ge=1)
        >>> fields(S)[0].metadata["bounds"].problem(0)
        'must be >= 1'
    """
    meta = {"bounds": Bounds(**limits)}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


class _FromPart:
    def __repr__(self) -> str:
        return "FROM_PART"


#: the default of a settings field that is its part's parameter of the same name (see :func:`settings_of`)
FROM_PART: Any = _FromPart()


def settings_of(part: type) -> Callable[[type], type]:
    """A class decorator (under ``@dataclass``) for a tip's settings group whose fields are its callback's
    parameters: each field declared ``= FROM_PART`` (or ``= bounded(FROM_PART, ...)``) takes the default of
    ``part``'s parameter of the same name, so a default is stated once, in the callback. The field's type stays the
    settings' own (what a YAML file may give, often narrower than what Python code may pass).

    Examples:
        >>> class Part:
        ...     def __init__(self, steps: int = 10, names: list = ["a"]) -> None: ...
        >>> @dataclass
        ... @settings_of(Part)
        ... class S:
        ...     enabled: bool = False
        ...     steps: int = bounded(FROM_PART, ge=1)
        ...     names: list[str] = FROM_PART
        >>> S(), S().names is not S().names
        (S(enabled=False, steps=10, names=['a']), True)
    """
    import copy
    import inspect

    params = inspect.signature(part).parameters  # the class: its __init__ without self

    def fill(cls: type) -> type:
        for name in cls.__dict__.get("__annotations__", {}):
            value = cls.__dict__.get(name)
            declared = value.default if isinstance(value, Field) else value
            if declared is not FROM_PART:
                continue
            param = params.get(name)
            if param is None or param.default is inspect.Parameter.empty:
                raise TypeError(f"{cls.__name__}.{name}: {part.__name__} has no parameter {name!r} with a default")
            default = param.default
            meta = value.metadata if isinstance(value, Field) else None
            if isinstance(default, (list, dict, set)):  # a mutable default: a fresh copy per instance
                setattr(cls, name, field(default_factory=lambda d=default: copy.deepcopy(d), metadata=meta))
            else:
                setattr(cls, name, field(default=default, metadata=meta) if meta is not None else default)
        return cls

    return fill


def part_kwargs(settings: Any, part: type, **overrides: Any) -> dict[str, Any]:
    """The fields of a settings group that ``part`` takes (its parameters of the same name), with ``overrides``:
    the callback is built from its settings without naming each one again.

    Examples:
        >>> class Part:
        ...     def __init__(self, steps: int = 10, names: Optional[list] = None) -> None: ...
        >>> @dataclass
        ... class S:
        ...     enabled: bool = True
        ...     steps: int = 3
        >>> part_kwargs(S(), Part), part_kwargs(S(), Part, names=["a"])
        ({'steps': 3}, {'steps': 3, 'names': ['a']})
    """
    import dataclasses
    import inspect

    params = inspect.signature(part).parameters
    taken = {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings) if f.name in params}
    return {**taken, **overrides}


@dataclass(frozen=True)
class Setting:
    """One ``speedups:`` key owned by a tip.

    Attributes:
        path: the key under ``speedups:`` (``"precision"``, ``"monitors.sync_guard"``; a group such
            as ``"loaders"`` takes a dataclass ``type``).
        type: its annotation, as jsonargparse reads it.
        default: its default value (off), or use ``factory`` for a mutable one.
        factory: builds the default (a group dataclass, a list).
        doc: one line for ``--help`` and the README.
        on: whether a value turns the part on (default: it differs from the default). The name of
            an active part is the setting's ``path``.
        bounds: the range of a number setting (a group's fields declare theirs with :func:`bounded`).
        validate: ``validate(value) -> problem or None`` for relations within the value (a group's
            fields that must agree); the problem names the fix.
    """

    path: str
    type: Any
    default: Any = None
    factory: Optional[Callable[[], Any]] = None
    doc: str = ""
    on: Optional[Callable[[Any], bool]] = None
    bounds: Optional[Bounds] = None
    validate: Optional[Callable[[Any], Optional[str]]] = None

    def default_value(self) -> Any:
        return self.factory() if self.factory is not None else self.default

    def is_on(self, value: Any) -> bool:
        if self.on is not None:
            return bool(self.on(value))
        return bool(value != self.default_value())

    def dataclass_field(self) -> Any:
        if self.factory is not None:
            return field(default_factory=self.factory)
        return field(default=self.default)

    def problems(self, value: Any) -> list[str]:
        """Every problem of ``value`` (``speedups.<key>: <value> <what is wrong>; fix: ...``), from its
        bounds, its group's field bounds and its ``validate``."""
        import dataclasses

        out: list[str] = []

        def fix(key: str, bounds: Bounds) -> str:
            return f"fix: set speedups.{key} to a value {bounds.text()}, or leave it out for the default"

        if self.bounds is not None and (why := self.bounds.problem(value)):
            out.append(f"speedups.{self.path}: {value!r} {why}; {fix(self.path, self.bounds)}")
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            for f in dataclasses.fields(value):
                bounds = f.metadata.get("bounds")
                v = getattr(value, f.name)
                if bounds is not None and (why := bounds.problem(v)):
                    key = f"{self.path}.{f.name}"
                    out.append(f"speedups.{key}: {v!r} {why}; {fix(key, bounds)}")
        if not out and self.validate is not None and (why := self.validate(value)):
            out.append(f"speedups.{self.path}: {why}")
        return out


@dataclass(frozen=True)
class Deferred:
    """Trainer arguments that wait for the model (see :meth:`BuildContext.automatic_only`).

    Attributes:
        name: the start-up summary's name for them (``"grad_clip (T15)"``).
        tip: the tip that wants them.
        kwargs: the Trainer arguments.
        what: the summary's line when they apply.
        fix: what a manual-optimization ``training_step`` calls instead.
    """

    name: str
    tip: str
    kwargs: Mapping[str, Any]
    what: str
    fix: str


#: The Trainer arguments Lightning refuses under manual optimization (``automatic_optimization = False``),
#: with their default (the value it accepts).
AUTOMATIC_ONLY: dict[str, Any] = {
    "gradient_clip_val": None,
    "gradient_clip_algorithm": None,
    "accumulate_grad_batches": 1,
}


@dataclass
class BuildContext:
    """What a tip's build functions see and add to while a section becomes Trainer arguments and callbacks.

    Attributes:
        accelerator: the Trainer's accelerator (decides ``auto`` settings).
        devices: the Trainer's ``devices``.
        trainer_kwargs: Trainer arguments set so far.
        notes: decisions made so far, for the start-up summary.
        model: the LightningModule the Trainer will fit, when the caller knows it (the CLI always
            does; ``preset(...).trainer_kwargs(model=...)`` from Python): settings Lightning would
            refuse for it are skipped with a reason before the Trainer is built.
        deferred: Trainer arguments that need the model and did not have it (``model`` is ``None``):
            a callback applies them in ``setup``, or skips them with the reason.
        lightning: the Lightning package of the Trainer (``"lightning.pytorch"`` or ``"pytorch_lightning"``),
            when known without a model; see :attr:`namespace`.
    """

    accelerator: Optional[str] = "auto"
    devices: Any = "auto"
    trainer_kwargs: dict[str, Any] = field(default_factory=dict)
    notes: list[Note] = field(default_factory=list)
    model: Any = None
    deferred: list[Deferred] = field(default_factory=list)
    lightning: Optional[str] = None

    @property
    def namespace(self) -> str:
        """The Lightning package the Trainer arguments are built for: the model's, else :attr:`lightning`, else
        ``lightning.pytorch`` (a strategy object must come from the Trainer's own package)."""
        from lightning_speedups.trainer.namespace import NAMESPACES, namespace_of

        return namespace_of(self.model) or self.lightning or NAMESPACES[0]

    def note(self, name: str, active: bool, reason: str) -> None:
        self.notes.append((name, active, reason))

    @property
    def manual_optimization(self) -> Optional[bool]:
        """Whether the model steps its optimizers itself; ``None`` while the model is unknown."""
        if self.model is None:
            return None
        return not bool(getattr(self.model, "automatic_optimization", True))

    def automatic_only(self, name: str, tip: str, kwargs: Mapping[str, Any], what: str, fix: str) -> None:
        """Set Trainer arguments that Lightning refuses under manual optimization.

        With an automatic-optimization model they are set (and noted ``what``); with a manual one they
        are skipped with a note naming the setting and ``fix`` (what ``training_step`` calls instead);
        with no model yet they are :attr:`deferred` to a callback that decides in ``setup``.
        """
        manual = self.manual_optimization
        if manual is None:
            self.deferred.append(Deferred(name, tip, dict(kwargs), what, fix))
        elif manual:
            self.note(name, False, manual_refusal(kwargs, fix))
        else:
            self.trainer_kwargs.update(kwargs)
            self.note(name, True, what)


def manual_refusal(kwargs: Mapping[str, Any], fix: str) -> str:
    """The one-line reason a setting is skipped under manual optimization."""
    flags = ", ".join(f"{k}={v!r}" for k, v in kwargs.items() if v != AUTOMATIC_ONLY.get(k, object()))
    return f"skipped: the model uses manual optimization, where Lightning refuses Trainer({flags}); {fix}"


@dataclass(frozen=True)
class BenchVariant:
    """How ``bench`` turns a tip on.

    Attributes:
        overrides: dotted ``speedups.*`` keys (without the ``speedups.`` prefix) and their values.
        goal: ``"speed"`` (a candidate for the combination search) or ``"memory"``.
        needs: what the setup must have for the tip to apply: ``"cuda"``, ``"convs"`` (4D/5D
            convolutions), ``"conv_bias"`` (a biased convolution feeding a BatchNorm),
            ``"blocks"`` (repeated blocks to checkpoint), ``"compile"`` (sub-modules with parameters).
        mode: ``"throughput"`` (timed by samples/s, the default bench) or ``"target"`` (it changes the
            optimisation, so it is judged only by time to a target metric: ``bench --target``).
        name: a suffix that tells several variants of one tip apart in reports (``"onecycle"``).
        batch_scale: bench sets ``largest_batch.batch_size`` to this multiple of the configured batch
            (read from the built datamodule or model); ``None``: no batch change.
    """

    overrides: Mapping[str, Any]
    goal: str = "speed"
    needs: tuple[str, ...] = ()
    mode: Literal["throughput", "target"] = "throughput"
    name: str = ""
    batch_scale: Optional[int] = None


#: The model kinds of the shared property suite (``tests/suite``).
KINDS = ("cnn", "transformer", "manual", "configure_model", "scheduler")
Maths = Literal["unchanged", "dtype", "changed"]


@dataclass(frozen=True)
class SuiteCase:
    """One run of the shared property suite for a part of a tip.

    Exactly one of ``settings`` (the part is built from ``speedups:`` keys, as presets build it),
    ``callback`` (a callback the settings never build, e.g. a watch) or ``function`` (a functional
    part applied to a model) says what runs.

    Attributes:
        name: the case's id in test names.
        settings: dotted ``speedups:`` keys and values that turn the part on.
        callback: builds the callback under test.
        function: ``function(model) -> result`` applies a functional part in place; a falsy result
            means it did nothing.
        maths: ``"unchanged"`` (outputs and gradients equal the original's, train and eval mode),
            ``"dtype"`` (equal within the precision it switches to) or ``"changed"`` (it changes the
            optimisation: only finiteness is checked).
        kinds: the model kinds the part applies to (it must act there); on the other kinds it must
            skip with a reason, or keep working, never crash.
        trainer: extra Trainer arguments the case needs.
        acted: ``acted(trainer, model, callbacks)`` raises ``AssertionError`` unless the part really
            did its job (default for callbacks: each of the pack's callbacks reports ``active``).
        compose: include it in the pairwise composition runs.
    """

    name: str
    settings: Mapping[str, Any] = field(default_factory=dict)
    callback: Optional[Callable[[], Callback]] = None
    function: Optional[Callable[[Any], Any]] = None
    maths: Maths = "changed"
    kinds: tuple[str, ...] = KINDS
    trainer: Mapping[str, Any] = field(default_factory=dict)
    acted: Optional[Callable[[Any, Any, Sequence[Any]], None]] = None
    compose: bool = True


def _no_kwargs(speedups: Any, ctx: BuildContext) -> None:
    return None


def _no_callbacks(speedups: Any, ctx: BuildContext) -> list[Placed]:
    return []


@dataclass(frozen=True)
class Tip:
    """One training-speed tip and everything the pack derives from it.

    Attributes:
        id: ``"T01"`` .. ``"T24"``.
        slug: short name used in reports (``"lr-schedule"``).
        title: one line.
        seeds: references into the seed documents (``"A#1"`` = tip 1 of document A).
        claim: what the seeds claim.
        does: the card: what the pack does for it.
        gain: the card: the expected gain (measured where the pack measured it).
        hurts: the card: when it hurts.
        settings: the ``speedups:`` keys it owns.
        uses: ``speedups:`` keys owned by another tip that also turn this one on.
        trainer_kwargs: ``(speedups, ctx)`` adds Trainer arguments and notes before the Trainer exists.
        callbacks: ``(speedups, ctx)`` returns ``(order, callback)`` pairs.
        parts: the classes and functions that implement it (objects, not names).
        lint_rules: codes of its lint rules (``"LS101"``).
        check: the doctor's check: ``check(facts) -> Finding``.
        bench: how bench times it: one :class:`BenchVariant` or a tuple of them (several variants, e.g.
            target-mode ones), or ``None`` with :attr:`not_timed` saying why not.
        not_timed: why bench never times it by samples/s (it has no ``"throughput"`` variant).
        suite: its shared-suite cases.
    """

    id: str
    slug: str
    title: str
    seeds: tuple[str, ...]
    claim: str
    does: str
    gain: str
    hurts: str
    check: Callable[[Facts], Finding]
    settings: tuple[Setting, ...] = ()
    uses: tuple[str, ...] = ()
    trainer_kwargs: Callable[[Any, BuildContext], None] = _no_kwargs
    callbacks: Callable[[Any, BuildContext], Iterable[Placed]] = _no_callbacks
    parts: tuple[Any, ...] = ()
    lint_rules: tuple[str, ...] = ()
    bench: Union[BenchVariant, tuple[BenchVariant, ...], None] = None
    not_timed: str = ""
    suite: tuple[SuiteCase, ...] = ()

    @property
    def bench_variants(self) -> tuple[BenchVariant, ...]:
        """Every bench variant of the tip (``bench`` as a tuple)."""
        if self.bench is None:
            return ()
        return self.bench if isinstance(self.bench, tuple) else (self.bench,)

    def bench_variant(self, mode: str = "throughput") -> Optional[BenchVariant]:
        """The tip's first variant of a mode (``None``: bench never times it that way)."""
        return next((v for v in self.bench_variants if v.mode == mode), None)

    @property
    def status(self) -> str:
        """``"implemented"``: every tip of the registry has parts, a check and (if it has settings) cases."""
        return "implemented" if (self.parts or self.lint_rules) else "planned"

    @property
    def preset_keys(self) -> tuple[str, ...]:
        """The ``speedups.*`` keys that turn it on (its own and the ones it uses)."""
        return tuple(f"speedups.{s.path}" for s in self.settings) + tuple(f"speedups.{k}" for k in self.uses)

    def card(self) -> str:
        """The card as its tip module's docstring states it (the one place it is written; a test keeps the
        docstring equal to the record)."""
        import textwrap

        lines = [f"Seeds: {', '.join(self.seeds)} (claim: {self.claim})."]
        for label, text in (("What it does", self.does), ("Expected gain", self.gain), ("When it hurts", self.hurts)):
            lines.append(f"{label}: {text}" + ("" if text.endswith(".") else "."))
        wrapped = [textwrap.fill(line, 100, initial_indent="    ", subsequent_indent="    ") for line in lines]
        return "Card:\n" + "\n".join(wrapped)


__all__ = [
    "AUTOMATIC_ONLY",
    "FROM_PART",
    "KINDS",
    "BenchVariant",
    "Bounds",
    "BuildContext",
    "Deferred",
    "Note",
    "PHASES",
    "Placed",
    "at",
    "Setting",
    "SettingError",
    "SuiteCase",
    "Tip",
    "bounded",
    "part_kwargs",
    "settings_of",
    "manual_refusal",
]
