"""``SpeedAdvisor``: every tip's doctor check inside a user's own ``fit``, with a report at the end.

Layer 4, above the tip registry: it may read the tips' titles and checks, and it imports nothing of
``doctor``, ``bench``, the session, the config or the CLI (``doctor`` builds on it). It holds
:func:`run_checks` (each check once, a check's own crash turned into a ``not-checked`` finding, lint
findings merged into their tip, the registry's slug and title filled in); the report it prints is
:func:`lightning_speedups.inspection.print_report`.

Card:
    What it does: at the first training batch (once every callback's ``setup`` and
    ``on_train_start`` ran, so model surgery, loader tuning and optimizer switches are visible) it
    reads the model, optimizers, loaders, precision and debugging switches; the first
    :data:`INSPECTED_STEPS` of the ``check_steps`` watched steps are inspected (host reads of device
    values, on CUDA device synchronisations; input statistics, zeroed gradients), the others timed
    with only clock marks at the step's boundaries (the forward / backward / optimizer shares, and the
    data wait: from one step's end to the next one's start, when no validation or epoch boundary ran
    between; with fewer than :data:`TIMED_APART_MIN` steps left after the inspected ones, every step is
    both); it watches autograd in validation, on CUDA unpinned batches and peak memory, and records the
    input shapes and the gradient norm on the inspected steps, then on every :data:`SAMPLE_EVERY`-th;
    on the few batches after them
    (:data:`QUIET_STEPS` + 1, with no monitor on) it times the step as it runs without the doctor
    and counts the operations of the last one (``torch.profiler``), and measures this device's fixed
    cost of one op: what the step's ops cost whatever they compute (the ``op-overhead`` verdict);
    at the end of ``fit`` it runs one check per tip
    T01-T24 (:func:`run_checks`), lints the source files of the model and data
    classes, and prints the report on global rank zero. ``python -m lightning_speedups doctor``
    uses the same callback on a few steps of the config's own fit.
    Seed: both documents, all tips; the report speaks in the second document's three principles
    (time on I/O, overlap, memory).
    Expected gain: none by itself: it says which tips apply, with the evidence and the exact fix.
    When it hurts: on the inspected steps (every torch call intercepted: a tiny model's step runs
    2.5x longer on a CPU), a little on the timed ones (clock reads, a gradient norm every
    :data:`SAMPLE_EVERY` steps; ``benchmarks/doctor_cost.py``) and on the three after them (the
    profiled one runs slower; a few milliseconds of one-element ops); after them it does nothing
    until the report.

Examples:
    >>> from lightning.pytorch import Trainer
    >>> from lightning_speedups import SpeedAdvisor
    >>> advisor = SpeedAdvisor(check_steps=5)
    >>> # trainer = Trainer(callbacks=[advisor]); trainer.fit(model)  -> report printed at the end
    >>> # advisor.findings: one Finding per tip T01..T24
"""

from __future__ import annotations

import contextlib
import statistics
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from typing_extensions import override

from lightning_speedups.callbacks import (
    DataWaitMonitor,
    GradsToNoneCheck,
    InputStatsCheck,
    NoGradEvalCheck,
    NonBlockingCheck,
    SpeedupCallback,
)
from lightning_speedups.errors import SettingError, SettingTypeError
from lightning_speedups.functional import HostReadCounter, OpCounter, ShapeTracker, SyncWatcher, op_fixed_cost
from lightning_speedups.functional.timing import StepPhases, Timeline
from lightning_speedups.inspection import (
    SEVERITIES,
    Facts,
    Finding,
    Item,
    collect_static,
    error_text,
    print_report,
    short_path,
    user_source_files,
)
from lightning_speedups.inspection.words import plural
from lightning_speedups.lint import lint_paths
from lightning_speedups.tips import BY_ID, TIPS

#: tip id -> its doctor check, from the tip records.
CHECKS: dict[str, Callable[[Facts], Finding]] = {tip.id: tip.check for tip in TIPS}

__all__ = [
    "INSPECTED_STEPS",
    "LINT_SEVERITY",
    "QUIET_STEPS",
    "SpeedAdvisor",
    "checks_by_tip",
    "lint_items",
    "run_checks",
]

#: The first watched steps inspected closely: host reads of device values (on CUDA the device synchronisations),
#: input statistics, zeroed gradients. The host-read watch intercepts every torch call in the process (the loader's
#: too): a tiny model's step runs 2.5x longer under it, so these steps are not the ones timed.
INSPECTED_STEPS = 3
#: The gradient norm (T15's evidence) and the batch's shapes (T07's) are taken on every inspected step, then on
#: every this-many-th watched step (a norm reads every gradient once more: 10% of a 1M-parameter MLP's CPU step when
#: taken every step, 3% of a tiny model's; a shape signature walks the batch: 1% of it)
SAMPLE_EVERY = 8
#: Watched steps needed after the inspected ones to time the step's phases and its wait for data apart from them;
#: with fewer watched steps every step is both inspected and timed.
TIMED_APART_MIN = 5

#: Per-step hooks with nothing to do on the timed steps (the inspected ones forward them to the monitors), and once
#: the watch is over: the advisor sets them to ``None`` on itself for those steps, and Lightning skips a callback's
#: hook that is not callable (its dispatch and the pack's guard cost a few microseconds a call: a tiny model's CPU
#: step is ~0.7 ms). :meth:`SpeedAdvisor.setup` and ``teardown`` put them back.
IDLE_ON_TIMED = ("on_before_zero_grad",)
IDLE_AFTER = ("on_before_zero_grad", "on_before_backward", "on_before_optimizer_step")

#: Training batches after the watched ones timed with no monitor on (the host-read watch alone makes a tiny model's
#: step 2.4x longer on a CPU): the step time the fixed cost per op is a share of. One more batch after them has
#: its operations counted (the profiler slows it, so it is not timed).
QUIET_STEPS = 2

#: Severity of a lint finding in the report, by rule code (default ``"low"``).
LINT_SEVERITY = {
    "LS301": "high",  # nn.DataParallel
    "LS305": "high",  # anomaly detection on
    "LS306": "medium",  # profiler on
    "LS201": "medium",  # .item()/.cpu() in the step
    "LS202": "medium",  # print(tensor) in the step
    "LS204": "medium",  # a device tensor formatted into a string in the step
    "LS205": "medium",  # an explicit device synchronize in the step
    "LS206": "medium",  # a host read in a helper the step calls
    "LS207": "medium",  # torch.cuda.empty_cache() in the step
    "LS208": "medium",  # self.log(..., sync_dist=True) every step
}


#: Lint rules whose finding is a host read that :class:`HostReadCounter` sees at run time.
RUNTIME_READ_RULES = ("LS201", "LS202", "LS204", "LS206")


def _seen_at_run_time(facts: Facts, finding: Any) -> str:
    """``""``, or what the run itself saw of a host-read lint finding's line."""
    reads = facts.host_reads
    if finding.code not in RUNTIME_READ_RULES or reads is None or not reads.windows:
        return ""
    n, steps = reads.at(finding.path, finding.line)
    if not n:
        return f" [not seen at run time in {plural(reads.windows, 'step')}]"
    every = "every step" if steps >= reads.windows else "not every step"
    return f" [confirmed at run time: {plural(n, 'read')} in {steps} of {reads.windows} steps, {every}]"


def lint_items(facts: Facts) -> dict[str, list[Item]]:
    """The lint findings of ``facts`` as evidence items, by tip; a host read is tagged with what the run saw."""
    out: dict[str, list[Item]] = {}
    for f in facts.lint_findings:
        seen = _seen_at_run_time(facts, f)
        severity = LINT_SEVERITY.get(f.code, "low")
        if seen.startswith(" [not seen") or seen.endswith("not every step]"):
            severity = "low"  # the run did not see it every step
        item = Item(severity, f"{short_path(f.path)}:{f.line}: {f.code} {f.message}{seen}", f.fix, "lint")
        out.setdefault(f.tip, []).append(item)
    return out


def checks_by_tip() -> dict[str, Callable[[Facts], Finding]]:
    """Tip id -> its doctor check, from the tip records, in registry order."""
    return {tip.id: tip.check for tip in TIPS}


def run_checks(facts: Facts, checks: Mapping[str, Callable[[Facts], Finding]] | None = None) -> list[Finding]:
    """One :class:`Finding` per tip T01-T24, in registry order, lint findings merged into their tip.

    A check that raises becomes ``not-checked`` with the error, so the doctor never crashes on an
    unusual model. Each result carries its tip's registry slug and title and the check's dotted name.

    Args:
        facts: what was collected.
        checks: tip id -> check (default: each tip record's check, :attr:`Tip.check`, in registry order).
    """
    lint = lint_items(facts)
    results = []
    for tip, check in (checks_by_tip() if checks is None else checks).items():
        try:
            result = check(facts)
        except Exception as err:
            result = Finding.not_checked(tip, f"the check failed: {error_text(err)}"[:300])
        extra = lint.get(tip, [])
        if extra:
            result = result.with_items(extra)
        rec = BY_ID[tip]
        name = f"{getattr(check, '__module__', '')}:{getattr(check, '__qualname__', type(check).__name__)}"
        results.append(result.described(rec.slug, rec.title, name))
    return results


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The monitors' own warnings are evidence for the report, not messages for the console."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


_FOREACH_NORM_DTYPES = frozenset({torch.float32, torch.float64, torch.bfloat16})


def _grad_norms(parameters: Any) -> torch.Tensor | None:
    """The 2-norms of the parameters' gradients, one per gradient, on the device (no host read); their own 2-norm is
    the total gradient norm (:func:`_total_norm`). Taken with one fused op where it can (a tiny model's step has fewer
    ops than it has gradients); fp16 and sparse gradients one by one in fp32, where a large norm does not overflow."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return None
    if {g.dtype for g in grads} <= _FOREACH_NORM_DTYPES and all(g.layout is torch.strided for g in grads):
        try:
            return torch.stack(torch._foreach_norm(grads))
        except RuntimeError:  # gradients on several devices, or of several dtypes: one by one below
            pass
    norms = [torch.linalg.vector_norm(g.float() if not g.is_sparse else g.coalesce()._values().float()) for g in grads]
    device = norms[0].device
    return torch.stack([n.to(device) for n in norms])


def _total_norm(norms: torch.Tensor) -> torch.Tensor:
    """The total gradient norm from :func:`_grad_norms`' per-gradient norms."""
    return torch.linalg.vector_norm(norms.float())


class SpeedAdvisor(SpeedupCallback):
    """Run the doctor's checks (one per tip T01-T24) inside ``fit`` and print the report at the end.

    Args:
        check_steps: training steps watched by the runtime monitors (>= 1).
        print_report: print the report at the end of ``fit`` (global rank zero only).
        lint: lint the source files of the model, DataModule and dataset classes (T08, T11-T14, T20, ...).
        show_ok: also list the tips that were checked and found fine, one line each.
        clock: the seconds counter of the run's timings (the data wait, the watched seconds);
            ``time.perf_counter`` by default, tests pass a fake one.

    After ``fit``: :attr:`findings` holds one :class:`~lightning_speedups.inspection.Finding` per
    tip, and :attr:`facts` the evidence they were made from.

    Examples:
        >>> advisor = SpeedAdvisor(check_steps=3, print_report=False)
        >>> advisor.findings
        []
    """

    tip = ""
    part = "advisor"
    #: the hooks of every watched step: the watch's cost is measured by ``benchmarks/doctor_cost.py``, not added up
    untimed_hooks = frozenset(
        {"on_train_batch_start", "on_before_backward", "on_before_zero_grad", "on_before_optimizer_step"}
        | {"on_train_batch_end"}
    )
    #: it changes nothing in the run: a Trainer with it still takes a preset (``LIGHTNING_SPEEDUPS=fast+doctor``)
    watches_only = True

    def __init__(
        self,
        check_steps: int = 5,
        print_report: bool = True,
        lint: bool = True,
        show_ok: bool = True,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        super().__init__()
        if isinstance(check_steps, bool) or not isinstance(check_steps, int) or check_steps < 1:
            raise SettingError(f"`SpeedAdvisor(check_steps=...)` must be an int >= 1 (e.g. 5), got {check_steps!r}.")
        for name, value in (("print_report", print_report), ("lint", lint), ("show_ok", show_ok)):
            if not isinstance(value, bool):
                raise SettingTypeError(f"`SpeedAdvisor({name}=...)` must be True or False, got {value!r}.")
        self.check_steps = check_steps
        self.print_report = print_report
        self.lint = lint
        self.show_ok = show_ok
        self.clock = clock
        #: the config's ``speedups:`` section, when the doctor knows it
        self.speedups: Any = None
        self.facts = Facts()
        self.findings: list[Finding] = []
        self._reset()

    def _reset(self) -> None:
        self._children: dict[str, Any] = {}  # key -> monitor whose hooks this callback forwards
        self._sources: dict[str, Any] = {}  # key -> monitor whose results are read (owned or the user's)
        self._watcher: Any = None
        self._reads: HostReadCounter | None = None  # off CUDA: the host reads a GPU run would sync on
        self._reading = False  # the host-read watch (and the module's `log` watch) is on
        self._log_watch = contextlib.ExitStack()  # the module's `log` watched for sync_dist during a window
        self._tracker: Any = None
        self._batches = 0
        self._in_window = False
        self._norms: list[torch.Tensor] = []
        self._eval_done = False
        self._eval_run_batches = 0
        self._finalized = False
        self._reported = False
        self._fit = False
        self._t0: float | None = None
        self._phases: StepPhases | None = None  # where the watched steps' time goes (forward, backward, optimizer)
        self._device: torch.device | None = None
        self._tail = 0  # batches started after the watched ones (timed quietly, then one counted)
        self._tail_line: Timeline | None = None
        self._tail_start: Any = None
        self._tail_marks: list[tuple[Any, Any]] = []
        self._counter: OpCounter | None = None
        self._inspect = min(INSPECTED_STEPS, self.check_steps)  # steps with the host-read / sync watch on
        # the first step whose phases and data wait are timed (0: every watched step, too few to time apart)
        self._timed_from = self._inspect if self.check_steps - self._inspect >= TIMED_APART_MIN else 0

    # ------------------------------------------------------------------------------------ plumbing
    def _add(self, trainer: Trainer, key: str, cls: type, **kwargs: Any) -> None:
        existing = next((cb for cb in getattr(trainer, "callbacks", []) if isinstance(cb, cls)), None)
        if existing is not None:
            self._sources[key] = existing  # the user's own monitor runs anyway: read its results
            return
        child = cls(**kwargs)
        self._children[key] = child
        self._sources[key] = child

    def _forward(self, hook: str, *args: Any, keys: tuple[str, ...] | None = None) -> None:
        for key, child in list(self._children.items()):
            if keys is not None and key not in keys:
                continue
            try:
                with _quiet(), self._own_reads():
                    getattr(child, hook)(*args)
            except Exception as err:
                self._monitor_failed(key, child, hook, err)

    def _monitor_failed(self, key: str, child: Any, hook: str, err: Exception) -> None:
        """A monitor's own crash: said in the report, and the monitor dropped for the rest of the run."""
        self.facts.unavailable[key] = f"monitor {type(child).__name__} failed in {hook}: {type(err).__name__}: {err}"
        self._children.pop(key, None)
        self._sources.pop(key, None)

    def _own_reads(self) -> contextlib.AbstractContextManager[None]:
        """The monitors' own host reads are not the run's."""
        return self._reads.paused() if self._reads is not None else contextlib.nullcontext()

    def _mute(self, hooks: tuple[str, ...]) -> None:
        """Lightning skips these hooks of this instance until :meth:`_unmute` (:data:`IDLE_ON_TIMED`)."""
        for name in hooks:
            vars(self)[name] = None

    def _unmute(self) -> None:
        for name in set(IDLE_ON_TIMED) | set(IDLE_AFTER):
            vars(self).pop(name, None)

    def _close_reads(self) -> None:
        if not self._reading:
            return
        self._reading = False
        if self._reads is not None:
            self._reads.stop()
        self._log_watch.close()

    @property
    def _window_open(self) -> bool:
        return self._fit and self._batches < self.check_steps

    def _step_forward(self, hook: str, *args: Any) -> None:
        """A training step's hook to the monitors: all of them on the inspected steps, none on the timed ones (a tiny
        model's CPU step is ~0.7 ms: forwarding four hooks to the monitors cost a tenth of it; the data wait is taken
        from the phases' clock marks)."""
        if self._batches < self._inspect:
            self._forward(hook, *args)

    @property
    def _sampled(self) -> bool:
        """Whether this watched step's gradient norm and batch shapes are taken (:data:`SAMPLE_EVERY`)."""
        return self._batches < self._inspect or not (self._batches - self._inspect) % SAMPLE_EVERY

    @property
    def tail_steps(self) -> int:
        """The batches run after the watched ones to time the step quietly and count its operations."""
        return QUIET_STEPS + 1

    @property
    def watch_done(self) -> bool:
        """The watched steps and the batches after them are over (or the fit ended before)."""
        return self._batches >= self.check_steps and (self._tail >= self.tail_steps and self._counter is None)

    # --------------------------------------------------------------------------------------- hooks
    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        self._unmute()
        self._reset()
        self._fit = True
        self._t0 = self.clock()
        self.findings = []
        self.facts = Facts(speedups=self.speedups)
        device = getattr(getattr(trainer, "strategy", None), "root_device", torch.device("cpu"))
        cuda = device.type == "cuda" and torch.cuda.is_available()
        # the data wait comes from the timed steps' marks (from the step after the first timed one: the last
        # inspected step's host-read window runs on through the next batch's fetch), or from the user's own monitor
        theirs = next((cb for cb in getattr(trainer, "callbacks", []) if isinstance(cb, DataWaitMonitor)), None)
        if theirs is not None:
            self._sources["data_wait"] = theirs
        self._add(trainer, "input_stats", InputStatsCheck, batches=self._inspect)
        self._add(trainer, "grads", GradsToNoneCheck, check_steps=self._inspect)
        self._add(trainer, "eval", NoGradEvalCheck, check_batches=2)
        if cuda:
            self._add(trainer, "non_blocking", NonBlockingCheck)
            self._watcher = SyncWatcher("count")
            self._watcher.install()
        else:
            self._reads = HostReadCounter()
        self._tracker = ShapeTracker()
        self._phases = StepPhases(Timeline(device if cuda else None, clock=self.clock))
        self._device = device
        self._tail_line = Timeline(device if cuda else None, clock=self.clock)
        self._forward("setup", trainer, pl_module, stage)
        self.report(True, f"collecting evidence over the first {self.check_steps} steps; report at the end of fit")

    @override
    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._fit:
            self._forward("on_fit_start", trainer, pl_module)

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._fit:
            self._forward("on_train_start", trainer, pl_module)

    @override
    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._phases is not None:
            self._phases.gap()  # the epoch's end and start ran since the last step: not a data wait
        if self._window_open:
            self._forward("on_train_epoch_start", trainer, pl_module)

    @override
    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        if not self._fit:
            return
        self._close_reads()  # a step's window runs on to the next step: Lightning's own reads come after its hooks
        if not self.facts.collected:
            with _quiet():
                collect_static(self.facts, trainer, pl_module, batch)
        if not self._window_open:
            self._tail_batch_start()
            return
        self._in_window = True
        if self._tracker is not None and self._sampled:
            self._tracker.update(batch)
        inspecting = self._batches < self._inspect
        self._step_forward("on_train_batch_start", trainer, pl_module, batch, batch_idx)
        if self._watcher is not None and inspecting:
            self._watcher.start()
        if self._reads is not None and inspecting:
            self._reads.mark_module(pl_module)
            self._reads.mark_all([batch])
            self._reads.start()
            self._reading = True
            self._log_watch.enter_context(self._reads.watching_log(pl_module))
        if self._phases is not None and self._batches >= self._timed_from:
            self._phases.mark("start")

    @override
    def on_before_zero_grad(self, trainer: Trainer, pl_module: LightningModule, optimizer: Any) -> None:
        if self._in_window:
            self._step_forward("on_before_zero_grad", trainer, pl_module, optimizer)

    @override
    def on_before_backward(self, trainer: Trainer, pl_module: LightningModule, loss: torch.Tensor) -> None:
        if self._in_window:
            if self._phases is not None:
                self._phases.mark("backward")
            self._step_forward("on_before_backward", trainer, pl_module, loss)

    @override
    def on_before_optimizer_step(self, trainer: Trainer, pl_module: LightningModule, optimizer: Any) -> None:
        if not self._in_window:
            return
        if self._phases is not None:
            self._phases.mark("optimizer")
        if not self._sampled:
            return  # a norm reads every gradient once more: a third of an SGD step on a wide model
        try:
            with torch.no_grad():
                norms = _grad_norms(p for g in optimizer.param_groups for p in g["params"])
            if norms is not None:
                self._norms.append(norms)  # kept on the device: summed and read once at the end, no sync per step
        except Exception as err:
            self.facts.unavailable["grad_norms"] = f"could not read gradient norms: {err}"

    @override
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not self._in_window:
            self._tail_batch_end()
            return
        if self._phases is not None:
            self._phases.mark("end")
        if self._watcher is not None:
            self._watcher.stop()
        self._step_forward("on_train_batch_end", trainer, pl_module, outputs, batch, batch_idx)
        self._in_window = False
        self._batches += 1
        self.facts.steps_run = self._batches
        if self._batches == self._inspect and self._timed_from:
            self._mute(IDLE_ON_TIMED)
        if self._batches >= self.check_steps:
            self._mute(IDLE_AFTER)
            self._harvest(trainer)

    # -- after the watched steps: the step timed with no monitor on, then one batch's operations counted ------------
    def _tail_batch_start(self) -> None:
        if not self._fit or self._batches < self.check_steps or self._tail >= self.tail_steps:
            return
        self._tail += 1
        if self._tail <= QUIET_STEPS:
            self._tail_start = self._tail_line.mark() if self._tail_line is not None else None
            return
        counter = OpCounter()
        try:
            with _quiet():
                counter.start()
        except Exception as err:  # another profiler on (Trainer(profiler=...)), a build without one
            self.facts.unavailable["op_overhead"] = f"could not count the step's operations: {error_text(err)}"[:300]
            return
        self._counter = counter

    def _tail_batch_end(self) -> None:
        if self._tail_start is not None and self._tail_line is not None:
            self._tail_marks.append((self._tail_start, self._tail_line.mark()))
            self._tail_start = None
            return
        counter, self._counter = self._counter, None
        if counter is None:
            return
        f = self.facts
        try:
            with _quiet():
                f.ops_per_step = counter.stop()
            f.op_cost_seconds = op_fixed_cost(self._device)
            if self._tail_marks and self._tail_line is not None:
                self._tail_line.sync()
                f.step_seconds = statistics.median(self._tail_line.seconds(a, b) for a, b in self._tail_marks)
        except Exception as err:
            f.unavailable["op_overhead"] = f"could not measure the fixed cost per op: {error_text(err)}"[:300]

    def _note_no_op_count(self) -> None:
        """Why the fixed cost per op was not measured, when the fit ended before the batches it needs."""
        f = self.facts
        if f.ops_per_step is not None or "op_overhead" in f.unavailable:
            return
        if self._batches < self.check_steps:
            why = f"the fit ended within the {plural(self.check_steps, 'watched step')}"
        else:
            why = f"the fit ended {plural(self._tail, 'batch', 'batches')} after the watched steps"
        f.unavailable["op_overhead"] = f"{why}: the fixed cost per op needs {self.tail_steps} batches after them"

    # -- evaluation: watched until one validation run with batches has ended -----------------------
    def _eval_open(self) -> bool:
        return self._fit and (not self._eval_done or self._window_open)

    @override
    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._close_reads()
        if self._phases is not None:
            self._phases.gap()  # validation runs before the next step: not a data wait
        if self._eval_open():
            self._eval_run_batches = 0
            self._forward("on_validation_start", trainer, pl_module)

    @override
    def on_validation_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self._eval_open():
            self._forward("on_validation_batch_start", trainer, pl_module, batch, batch_idx, dataloader_idx)

    @override
    def on_validation_batch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if self._eval_open():
            if not self._eval_done:
                self._eval_run_batches += 1
            self._forward("on_validation_batch_end", trainer, pl_module, outputs, batch, batch_idx, dataloader_idx)

    @override
    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self._eval_open():
            return
        self._forward("on_validation_end", trainer, pl_module)
        if not self._eval_done and self._eval_run_batches:
            self._eval_done = True
            checker = self._children.get("eval")
            limit = getattr(checker, "check_batches", 2) if checker is not None else 2
            self.facts.eval_batches_checked = min(self._eval_run_batches, limit)

    # -- the end ---------------------------------------------------------------------------------
    @override
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._close_reads()

    @override
    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._close_reads()
        if self._fit:
            self._forward("on_train_end", trainer, pl_module)
            self._harvest(trainer)

    @override
    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self._fit:
            return
        self.finish(trainer, pl_module)

    @override
    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage == "fit":
            self._release(trainer, pl_module, stage)

    @override
    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        if not self._fit:
            return
        first = str(exception).strip().splitlines()[0] if str(exception).strip() else ""
        self.facts.run_error = f"{type(exception).__name__}: {first}"[:300]
        self._forward("on_exception", trainer, pl_module, exception)
        self._release(trainer, pl_module, "fit")

    def _release(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self._unmute()
        self._close_reads()
        if self._counter is not None:
            self._counter.discard()  # the counted batch did not end
            self._counter = None
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher.uninstall()
        self._forward("teardown", trainer, pl_module, stage)
        self._in_window = False

    # ---------------------------------------------------------------------------------- evidence
    def _harvest(self, trainer: Trainer) -> None:
        """Read the monitors' results into :attr:`facts` (idempotent; the last call wins)."""
        with self._own_reads():
            self._read_results(trainer)

    def _read_results(self, trainer: Trainer) -> None:
        f = self.facts
        f.steps_run = self._batches
        if self._t0 is not None:
            f.seconds = self.clock() - self._t0
        dw = self._sources.get("data_wait")
        if dw is not None:
            f.data_wait_fraction = dw.data_wait_fraction
            f.data_wait_steps = int(getattr(dw, "steps", 0) or 0)
        elif self._phases is not None:
            wait, busy, n = self._phases.data_wait()
            f.data_wait_fraction = wait / busy if busy > 0 else None
            f.data_wait_steps = n
        stats = self._sources.get("input_stats")
        if stats is not None:
            with _quiet():
                if self._batches and "input_stats" in self._children and hasattr(stats, "_judge"):
                    stats._judge()
            f.input_stats = dict(getattr(stats, "stats", {}) or {})
            f.input_problems = dict(getattr(stats, "problems", {}) or {})
            f.input_batches = min(self._batches, int(getattr(stats, "batches", self._batches)))
        grads = self._sources.get("grads")
        if grads is not None:
            f.zeroed_grads = getattr(grads, "finding", None)
            f.zeroed_culprit = getattr(grads, "culprit", None)
            f.grads_checked = int(getattr(grads, "_checked", 0) or 0)
        ev = self._sources.get("eval")
        if ev is not None:
            f.eval_findings = list(getattr(ev, "findings", []) or [])
        nb = self._sources.get("non_blocking")
        if nb is not None:
            f.unpinned = dict(getattr(nb, "unpinned", {}) or {})
            f.pinned_checked = self._batches > 0
        f.shape_tracker = self._tracker
        if self._phases is not None:
            f.phase_seconds = self._phases.seconds()
        if self._watcher is not None:
            f.sync_watcher = self._watcher
        if self._reads is not None:
            f.host_reads = self._reads
        if self._norms:
            try:
                with torch.no_grad():
                    totals = torch.stack([_total_norm(n).to(self._norms[0].device) for n in self._norms])
                f.grad_norms = [float(x) for x in totals.cpu()]
            except Exception as err:
                f.unavailable["grad_norms"] = f"could not read gradient norms: {err}"
        device = getattr(getattr(trainer, "strategy", None), "root_device", None)
        if device is not None and device.type == "cuda" and torch.cuda.is_available():
            try:
                f.peak_memory = int(torch.cuda.max_memory_allocated(device))
                f.total_memory = int(torch.cuda.get_device_properties(device).total_memory)
            except Exception as err:
                f.unavailable["memory"] = f"could not read CUDA memory: {err}"

    def _lint(self) -> None:
        f = self.facts
        if not self.lint:
            return
        objects: list[Any] = [f.model, f.datamodule]
        for loader in f.train_loaders:
            dataset = getattr(loader, "dataset", None)
            while dataset is not None and hasattr(dataset, "dataset") and type(dataset).__name__ == "Subset":
                dataset = dataset.dataset
            objects.append(dataset)
        try:
            files = user_source_files(objects)
            result = lint_paths(files, include_tests=True) if files else None
        except Exception as err:
            f.lint_error = f"{type(err).__name__}: {err}"
            return
        f.lint_ran = True
        f.lint_files = files
        f.lint_findings = list(result.findings) if result is not None else []

    def finish(self, trainer: Trainer | None = None, pl_module: LightningModule | None = None) -> list[Finding]:
        """Run the checks on what was collected (collecting the static facts now if no batch ran).

        Called at the end of ``fit``; the doctor calls it itself when ``fit`` failed. Prints the
        report once when ``print_report`` is set (global rank zero only).
        """
        if trainer is not None:
            if not self.facts.collected:
                with _quiet():
                    try:
                        collect_static(self.facts, trainer, pl_module, None)
                    except Exception as err:
                        self.facts.unavailable["static"] = f"could not inspect the trainer: {err}"
            self._harvest(trainer)
        if not self._finalized:
            self._lint()
            self._finalized = True
        if self._fit:
            self._note_no_op_count()
        self.findings = run_checks(self.facts)
        n = sum(1 for x in self.findings if x.status == "finding")
        self.report(
            True, f"{n} tip(s) apply, report printed at the end of fit" if self.print_report else f"{n} tip(s) apply"
        )
        if self.print_report and not self._reported and (trainer is None or trainer.is_global_zero):
            self._reported = True
            print_report(self.findings, self.facts, show_ok=self.show_ok, title="lightning_speedups SpeedAdvisor")
        return self.findings

    def worst(self) -> str | None:
        """The highest severity among the findings (``None`` when nothing applies)."""
        for sev in SEVERITIES:
            if any(x.status == "finding" and x.severity == sev for x in self.findings):
                return sev
        return None
