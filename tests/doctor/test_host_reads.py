"""Host reads of device values counted at run time on the CPU (T08 off CUDA): what would sync on a GPU,
with the user's file:line (through a helper in another file), the steps it ran in, Lightning's own
reads named by their setting, and the lint findings of the same lines tagged by what the run saw."""

from __future__ import annotations

import importlib
import sys
import textwrap

import pytest
import torch

from lightning_speedups.advisor import INSPECTED_STEPS, TIMED_APART_MIN
from lightning_speedups.doctor import SpeedAdvisor
from lightning_speedups.functional import HostReadCounter, count_host_reads


def _whats(counter: HostReadCounter) -> list[str]:
    return sorted(r.what for r in counter.reads)


@pytest.mark.parametrize(
    ("read", "what"),
    [
        (lambda t: t.sum().item(), ".item()"),
        (lambda t: t.tolist(), ".tolist()"),
        (lambda t: t.detach().numpy(), ".numpy()"),
        (lambda t: t.cpu(), ".cpu()"),
        (lambda t: t.to("cpu"), ".to('cpu')"),
        (lambda t: float(t.sum()), "float(t)"),
        (lambda t: int(t.sum()), "int(t)"),
        (lambda t: bool(t.sum() > 0), "a tensor as a condition (bool(t), if/while/and/or)"),
        (lambda t: f"{t.sum():.2f}", "a tensor formatted into a string"),
        (lambda t: repr(t), "a tensor printed or formatted (repr)"),
        (lambda t: t[t > 0], "boolean-mask indexing (output size depends on the data)"),
        (lambda t: t.nonzero(), "nonzero (output size depends on the data)"),
        (lambda t: torch.where(t > 0), "where(condition) with one argument (output size depends on the data)"),
        (lambda t: t.unique(), "unique (output size depends on the data)"),
        (lambda t: t.masked_select(t > 0), "masked_select (output size depends on the data)"),
    ],
)
def test_each_kind_of_host_read_of_a_device_value_is_counted(read, what):
    w = torch.nn.Parameter(torch.randn(6))
    with count_host_reads(w) as reads:
        read(w.detach() * 2)  # a value computed from a parameter lives on the device
    assert _whats(reads) == [what]
    assert reads.total == 1 and reads.windows == 1


def test_a_masked_assignment_reads_the_mask():
    w = torch.nn.Parameter(torch.randn(6))
    with count_host_reads(w) as reads:
        x = w.detach().clone()
        x[x > 0] = 0.0
    assert _whats(reads) == ["boolean-mask indexing (output size depends on the data)"]


def test_host_values_are_not_device_values():
    w = torch.nn.Parameter(torch.randn(3))
    with count_host_reads(w) as reads:
        step = torch.tensor(4.0)  # made without a device (Adam's step counter): on the host on a GPU run too
        _ = step.item()
        host = (w.detach() * 2).cpu()  # one read: the copy; the host copy is then free to read
        _ = host.tolist(), host.numpy(), float(host.sum())
        _ = torch.arange(5)[torch.arange(5) > 2]
    assert _whats(reads) == [".cpu()"]


def test_device_values_spread_through_grads_factories_and_moves():
    model = torch.nn.Linear(3, 1)
    with count_host_reads(model) as reads:
        model(torch.ones(2, 3)).sum().backward()
        _ = model.weight.grad.norm().item()  # p.grad of a device parameter
        _ = torch.zeros(2, device=model.weight.device).sum().item()  # made on the device
        _ = torch.ones(2).to(model.weight.device).sum().item()  # moved there
        _ = torch.zeros_like(model.bias).sum().item()  # like a device value
    assert reads.total == 4
    assert reads.steps_of and all(s == {0} for s in reads.steps_of.values())


def test_a_paused_counter_records_nothing_but_keeps_tracking():
    w = torch.nn.Parameter(torch.randn(3))
    counter = HostReadCounter()
    counter.mark_all([w])
    with counter.window():
        with counter.paused():
            y = w * 2
            _ = y.sum().item()  # a monitor's own read
        _ = (y + 1).sum().item()  # y was tracked while paused
    assert counter.total == 1


def test_the_window_is_closed_and_restored():
    counter = HostReadCounter()
    with counter.window():
        assert counter.active
    assert not counter.active
    w = torch.nn.Parameter(torch.randn(3))
    counter.mark_all([w])
    _ = (w * 2).sum().item()  # outside any window
    assert counter.total == 0 and counter.windows == 1


HELPER = """
def class_counts(preds):
    return preds.argmax(1).bincount(minlength=3).tolist()
"""

MODULE = """
import torch
import lightning.pytorch as pl
from torch.utils.data import DataLoader, TensorDataset

from {helper} import class_counts


class FourReads(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(8, 3)
        self.seen = 0.0

    def training_step(self, batch, batch_idx):
        x, y = batch
        out = self.net(x)
        loss = torch.nn.functional.cross_entropy(out, y)
        self.seen += loss.item()
        if loss > 100:
            print("diverged")
        counts = class_counts(out)
        self.every_fifty(loss, batch_idx)
        self.log("train_loss", loss, prog_bar=True)
        self.log("synced", loss, sync_dist=True)
        return loss

    def every_fifty(self, loss, batch_idx):
        if batch_idx % 50 != 0:
            return
        self.last = loss.item()

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.val_seen = torch.nn.functional.cross_entropy(self.net(x), y).item()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        return DataLoader(TensorDataset(torch.randn(64, 8, generator=g), torch.randint(0, 3, (64,), generator=g)),
                          batch_size=8)

    def val_dataloader(self):
        return self.train_dataloader()
"""


@pytest.fixture
def four_reads(tmp_path, monkeypatch):
    name = f"reads_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}_helper.py").write_text(textwrap.dedent(HELPER))
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(MODULE.format(helper=f"{name}_helper")))
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module(name)
    yield mod, tmp_path / f"{name}.py", tmp_path / f"{name}_helper.py"
    sys.modules.pop(name, None)
    sys.modules.pop(f"{name}_helper", None)


def _line(path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_the_advisor_counts_the_runs_host_reads_on_cpu(four_reads):
    from helpers import quiet_trainer

    mod, model_file, helper_file = four_reads
    advisor = SpeedAdvisor(check_steps=6, print_report=False)
    quiet_trainer(max_steps=6, callbacks=[advisor], limit_val_batches=1, num_sanity_val_steps=0).fit(mod.FourReads())
    reads = advisor.facts.host_reads
    assert reads is not None and reads.windows == INSPECTED_STEPS == 3  # the first 3 of the 6 watched steps
    by_place = {(r.site.location.split(" in ")[0], r.what): (n, s, r) for r, n, s in reads.rows()}
    item = f"{model_file.name}:{_line(model_file, 'self.seen += loss.item()')}"
    cond = f"{model_file.name}:{_line(model_file, 'if loss > 100')}"
    fifty = f"{model_file.name}:{_line(model_file, 'self.last = loss.item()')}"
    helper = f"{helper_file.name}:{_line(helper_file, '.tolist()')}"
    found = {(loc.rsplit("/", 1)[-1], what): v for (loc, what), v in by_place.items()}
    assert found[(item, ".item()")][:2] == (3, 3)
    assert found[(cond, "a tensor as a condition (bool(t), if/while/and/or)")][:2] == (3, 3)
    n, steps, read = found[(helper, ".tolist()")]
    assert (n, steps) == (3, 3) and model_file.name in read.via and "training_step" in read.via
    assert found[(fifty, ".item()")][:2] == (1, 1)  # behind an early return: batch 0 of every 50
    # Lightning's own reads: named by the setting, not blamed on the user
    pbar = [r for r in reads.reads if r.site.owner == "lightning"]
    assert pbar and all("'train_loss'" in r.site.kind and "prog_bar=True" in r.site.kind for r in pbar)
    # the validation step's read is not a training step's
    assert not any("val_seen" in r.site.code for r in reads.reads)
    t08 = next(f for f in advisor.findings if f.tip == "T08")
    assert t08.status == "finding" and "counted on cpu" in " ".join(t08.notes)
    runtime = [i for i in t08.items if i.source == "runtime"]
    assert any("1 host read in 1 of 3 training steps" in i.evidence and i.severity == "low" for i in runtime)
    assert any(helper_file.name in i.evidence and i.severity == "medium" for i in runtime)
    # sync_dist=True on a per-step value: nothing on one device, an all-reduce per step under DDP, at the user's line
    synced = f"{model_file.name}:{_line(model_file, 'sync_dist=True')}"
    (sd,) = [i for i in runtime if "sync_dist=True" in i.evidence]
    assert synced in sd.evidence and "'synced'" in sd.evidence and "3 of 3" in sd.evidence and sd.severity == "low"
    assert reads.total == sum(n for r, n in reads.reads.items() if "sync_dist" not in r.what)
    # the lint findings of the same lines say what the run saw
    lint = {i.evidence.split(": ")[0].rsplit("/", 1)[-1]: i for i in t08.items if i.source == "lint"}
    assert "confirmed at run time: 3 reads in 3 of 3 steps, every step" in lint[item].evidence
    if fifty in lint:  # lint may not report it at all; if it does, the run says how often
        assert "1 of 3 steps, not every step" in lint[fifty].evidence and lint[fifty].severity == "low"


def _mode_per_step(check_steps: int, max_steps: int):
    import lightning.pytorch as pl
    from helpers import quiet_trainer
    from torch.utils.data import DataLoader, TensorDataset

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(4, 2)
            self.modes: list[bool] = []

        def training_step(self, batch, batch_idx):
            self.modes.append(torch._C._is_torch_function_mode_enabled())
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self):
            return DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=4)

    model, advisor = Model(), SpeedAdvisor(check_steps=check_steps, print_report=False, lint=False)
    quiet_trainer(max_steps=max_steps, callbacks=[advisor], limit_val_batches=0).fit(model)
    return model.modes[:max_steps], advisor  # the report's memory estimate runs one more step after the fit


def test_the_timed_steps_run_without_the_host_read_watch():
    """Issue 36 item 7: the host-read watch (every torch call intercepted) is on for the first inspected steps only;
    the phases and the data wait are timed on the watched steps after them, with no torch-function mode on."""
    modes, advisor = _mode_per_step(check_steps=12, max_steps=16)
    assert modes[:INSPECTED_STEPS] == [True] * INSPECTED_STEPS
    assert modes[INSPECTED_STEPS:] == [False] * (16 - INSPECTED_STEPS)
    assert advisor.facts.host_reads is not None and advisor.facts.host_reads.windows == INSPECTED_STEPS
    # phases marked on the 9 timed steps only (the median leaves out the first of them)
    assert advisor._phases is not None and len(advisor._phases.steps) == 12 - INSPECTED_STEPS
    assert set(advisor.facts.phase_seconds) == {"forward", "backward", "optimizer"}
    # the data wait left out the step whose fetch ran under the last inspected step's window
    assert advisor.facts.data_wait_steps == 12 - INSPECTED_STEPS - 1


def test_too_few_watched_steps_are_inspected_and_timed_alike():
    """With fewer than TIMED_APART_MIN steps after the inspected ones, every watched step is timed (as before)."""
    check = INSPECTED_STEPS + TIMED_APART_MIN - 1
    modes, advisor = _mode_per_step(check_steps=check, max_steps=check)
    assert modes == [True] * INSPECTED_STEPS + [False] * (check - INSPECTED_STEPS)
    assert advisor._phases is not None and len(advisor._phases.steps) == check
    assert advisor.facts.data_wait_steps == check - 1


def _linear_model(samples: int, validate: bool = False):
    """A one-layer regression on ``samples`` random rows, batches of 4 (and 4 validation rows with ``validate``)."""
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader, TensorDataset

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(4, 2)

        def training_step(self, batch, batch_idx):
            return self.net(batch[0]).pow(2).mean()

        def validation_step(self, batch, batch_idx):
            return None

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self):
            return DataLoader(TensorDataset(torch.randn(samples, 4)), batch_size=4)

        def val_dataloader(self):
            return DataLoader(TensorDataset(torch.randn(4 if validate else 0, 4)), batch_size=4)

    return Model()


def test_the_data_wait_is_taken_between_timed_steps_with_nothing_else_between():
    """The timed steps' data wait comes from their clock marks: from one step's end to the next one's start, leaving
    out a step that validation or an epoch boundary ran before (their time is not a wait for data). A fake clock
    that ticks 1 per read: every step's span is a whole number of ticks, the wait between steps exactly one tick."""
    from helpers import quiet_trainer

    ticks = iter(range(10**6))
    advisor = SpeedAdvisor(check_steps=12, print_report=False, lint=False, clock=lambda: float(next(ticks)))
    trainer = quiet_trainer(max_steps=12, val_check_interval=3, num_sanity_val_steps=0, callbacks=[advisor])
    trainer.fit(_linear_model(24, validate=True))  # 6 batches an epoch
    # timed: steps 3-11; validation ran before steps 3, 6 (also a new epoch) and 9; step 3 follows no timed step
    assert len(advisor._phases.steps) == 12 - INSPECTED_STEPS
    assert advisor.facts.data_wait_steps == 6  # steps 4, 5, 7, 8, 10, 11
    wait, busy, n = advisor._phases.data_wait()
    assert (wait, n) == (6.0, 6) and 0 < advisor.facts.data_wait_fraction == wait / busy < 1


def test_shapes_and_gradient_norms_are_sampled_on_the_timed_steps():
    """On the inspected steps every batch's shapes and gradient norm are taken, then every SAMPLE_EVERY-th step's."""
    from lightning_speedups.advisor import SAMPLE_EVERY

    modes, advisor = _mode_per_step(check_steps=20, max_steps=20)
    sampled = INSPECTED_STEPS + len(range(INSPECTED_STEPS, 20, SAMPLE_EVERY))
    assert advisor.facts.shape_tracker.steps == sampled
    assert len(advisor.facts.grad_norms) == sampled and all(n > 0 for n in advisor.facts.grad_norms)


def test_the_total_gradient_norm_is_torchs():
    """The per-gradient norms (fused where the dtypes allow, one by one for fp16 and sparse ones) add up to the norm
    torch's clipping would see."""
    from lightning_speedups.advisor import _grad_norms, _total_norm

    params = [
        torch.nn.Parameter(torch.randn(5, 3)),
        torch.nn.Parameter(torch.randn(4)),
        torch.nn.Parameter(torch.ones(2)),
    ]
    for p in params:
        p.grad = torch.randn_like(p)
    params[2].grad = None  # a parameter with no gradient is left out
    expected = torch.linalg.vector_norm(torch.cat([params[0].grad.flatten(), params[1].grad]))
    assert torch.allclose(_total_norm(_grad_norms(params)), expected)
    half = torch.nn.Parameter(torch.randn(3).half())
    half.grad = torch.full((3,), 60000.0, dtype=torch.float16)  # its norm overflows fp16: taken in fp32
    assert torch.isfinite(_total_norm(_grad_norms([half]))) and _total_norm(_grad_norms([half])) > 1e5
    assert _grad_norms([torch.nn.Parameter(torch.ones(2))]) is None


def test_idle_hooks_are_skipped_on_the_timed_steps_and_after_the_watch():
    """Hooks with nothing to do are set to None on the advisor (Lightning skips a hook that is not callable):
    on_before_zero_grad on the timed steps, the backward and optimizer hooks too after the watch; the class's
    hooks are back once the fit ends, so a second fit is watched the same way."""
    import lightning.pytorch as pl
    from helpers import quiet_trainer

    from lightning_speedups.advisor import IDLE_AFTER

    seen: list[tuple[bool, bool]] = []

    class Spy(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            seen.append((advisor.on_before_zero_grad is None, advisor.on_before_backward is None))

    advisor = SpeedAdvisor(check_steps=10, print_report=False, lint=False)
    for _ in range(2):
        seen.clear()
        quiet_trainer(max_steps=14, callbacks=[advisor, Spy()], limit_val_batches=0).fit(_linear_model(80))
        inspected, timed, after = seen[:INSPECTED_STEPS], seen[INSPECTED_STEPS:10], seen[10:]
        assert inspected == [(False, False)] * INSPECTED_STEPS
        assert timed == [(True, False)] * (10 - INSPECTED_STEPS) and after == [(True, True)] * 4
        assert all(callable(getattr(advisor, name)) for name in IDLE_AFTER)
        assert advisor.facts.grads_checked == INSPECTED_STEPS and len(advisor.facts.grad_norms) == 4
        assert set(advisor.facts.phase_seconds) == {"forward", "backward", "optimizer"}


def test_the_advisors_own_monitors_are_not_counted(four_reads):
    from helpers import quiet_trainer

    mod, _, _ = four_reads
    advisor = SpeedAdvisor(check_steps=2, print_report=False)
    quiet_trainer(max_steps=2, callbacks=[advisor], limit_val_batches=0).fit(mod.FourReads())
    owners = {r.site.owner for r in advisor.facts.host_reads.reads}
    assert owners == {"user", "lightning"}
    assert not any("lightning_speedups" in r.site.location for r in advisor.facts.host_reads.reads)
