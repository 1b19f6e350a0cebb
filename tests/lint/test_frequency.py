"""How often a line runs, as the rubric reads it (../shared/LINT_RUBRIC.md): early exits in the function or
a caller, a backward-and-step function run once, and host reads in a row that wait for the same work."""

from __future__ import annotations

import textwrap

from lightning_speedups.lint import lint_source, lint_sources


def _found(src: str, select: str = "LS201") -> list[tuple[int, str]]:
    return [(f.line, f.runs) for f in lint_source(textwrap.dedent(src), "train.py", select=[select])]


def test_an_early_continue_or_return_narrows_the_rest_of_the_loop():
    src = """
    import torch

    def train(model, loader, opt):
        for i, (x, y) in enumerate(loader):
            loss = model(x.cuda()).mean()
            loss.backward()
            opt.step()
            if i % 20 != 0:
                continue
            print(loss.item())
    """
    assert _found(src) == []
    every = src.replace("            if i % 20 != 0:\n                continue\n", "")
    assert _found(every) == [(11 - 2, "per batch")]


def test_an_early_return_in_a_caller_counts():
    model = """
    import lightning.pytorch as pl

    class Net(pl.LightningModule):
        def training_step(self, batch, batch_idx):
            loss = self.model(batch).mean()
            self.report(loss, batch_idx)
            return loss

        def report(self, loss, batch_idx):
            if batch_idx % 50:
                return
            self.plot(loss)

        def plot(self, loss):
            self.last = loss.item()
    """
    assert _found(model) == []
    assert _found(model.replace("            if batch_idx % 50:\n                return\n", "")) == [
        (16 - 2, "per batch")
    ]


def test_a_backward_and_step_run_once_from_a_start_hook_is_not_a_training_step():
    src = """
    import lightning.pytorch as pl

    class Check(pl.Callback):
        def on_train_start(self, trainer, pl_module):
            self.probe(pl_module, trainer.optimizers[0])

        def probe(self, model, opt):
            loss = model(model.example_input_array).mean()
            loss.backward()
            opt.step()
            self.first = loss.item()
    """
    assert _found(src) == []


def test_host_reads_in_a_row_are_one_finding_naming_the_others():
    src = """
    import torch

    def train(model, loader, opt, log):
        for x, y in loader:
            q1, q2, loss = model(x.cuda())
            loss.backward()
            opt.step()
            log["q1"] = q1.mean().item()
            log["q2"] = q2.mean().item()
            log["loss"] = loss.item()
    """
    (f,) = lint_source(textwrap.dedent(src), "train.py", select=["LS201"])
    assert f.line == 9 and "2 more host reads right after it (lines 10-11) wait for the same work" in f.message
    # a model call between two reads queues new work: the second waits for it, two findings
    split = src.replace('            log["q2"]', '            q2 = model.head(q2)\n            log["q2"]')
    assert [x.line for x in lint_source(textwrap.dedent(split), "train.py", select=["LS201"])] == [9, 11]


def test_reads_in_a_helper_of_another_file_merge_too():
    train = "from meter import log_all\n\ndef fit(loader, net, opt):\n    for x in loader:\n        loss = net(x.cuda()).sum()\n        loss.backward()\n        opt.step()\n        log_all(loss, loss * 2)\n"
    meter = "def log_all(a, b):\n    print(a.item())\n    print(b.item())\n"
    found = lint_sources({"train.py": train, "meter.py": meter}, select=["LS206"])
    assert [(f.path, f.line) for f in found] == [("meter.py", 2)] and "1 more host read" in found[0].message


def test_a_synchronize_before_a_host_read_names_the_read_in_its_fix():
    src = """
    import torch

    def train(model, loader, opt):
        for x in loader:
            loss = model(x.cuda()).mean()
            loss.backward()
            opt.step()
            torch.cuda.synchronize()
            print(loss.item())
    """
    (f,) = lint_source(textwrap.dedent(src), "train.py", select=["LS205"])
    assert f.line == 9 and "`loss.item()` (line 10)" in f.fix and "alone gains nothing" in f.fix
    alone = lint_source(textwrap.dedent(src.replace("            print(loss.item())\n", "")), "t.py", select=["LS205"])
    assert "remove it" in alone[0].fix and "line 10" not in alone[0].fix


def test_a_synchronize_a_cuda_event_timer_needs_is_never_advised_away():
    """Issue 38: removing the synchronize before ``start.elapsed_time(end)`` makes elapsed_time raise (the end
    event has not completed); the finding says to read the timings every N steps instead."""
    src = """
    import torch

    def train(model, loader, opt):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for x in loader:
            start.record()
            loss = model(x.cuda()).mean()
            loss.backward()
            opt.step()
            end.record()
            torch.cuda.synchronize()
            print(start.elapsed_time(end))
    """
    (f,) = lint_source(textwrap.dedent(src), "train.py", select=["LS205"])
    assert f.line == 12 and "keep it while `start.elapsed_time(end)` (line 13)" in f.fix, f.fix
    assert "remove" not in f.fix and "every N batches" in f.fix


def test_a_read_under_a_configuration_switch_is_not_sure_to_run_every_step():
    src = """
    import lightning.pytorch as pl

    class Net(pl.LightningModule):
        def training_step(self, batch, batch_idx):
            loss = self.model(batch).mean()
            if self.hparams.nan_check:
                self.finite = loss.isfinite().item()
            if self.training:
                self.seen = loss.item()
            return loss
    """
    src = textwrap.dedent(src)
    every = {f.line: f for f in lint_source(src, "net.py", select=["LS201"])}
    assert set(every) == {8, 10}
    assert "(under `if self.hparams.nan_check:` (line 7))" in every[8].message
    assert "(under" not in every[10].message  # self.training is run state, not a switch
    assert [f.line for f in lint_source(src, "net.py", select=["DEFAULT"])] == [10]


def test_an_early_continue_until_a_moving_threshold_runs_once_per_period():
    src = """
    import torch

    def training_loop(model, loader, opt, kimg_per_tick=4):
        tick_start_nimg = cur_nimg = 0
        for x in loader:
            loss = model(x.cuda()).mean()
            loss.backward()
            opt.step()
            cur_nimg += x.shape[0]
            if cur_nimg < tick_start_nimg + kimg_per_tick * 1000:
                continue
            tick_start_nimg = cur_nimg
            print(f"loss {loss.item():.3f}")
    """
    assert _found(src) == []
    assert _found(
        src.replace("            if cur_nimg < tick_start_nimg + kimg_per_tick * 1000:\n                continue\n", "")
    ) == [(14 - 2, "per batch")]


def test_either_branch_of_a_switch_compared_to_a_constant_is_under_the_switch():
    src = """
    import lightning.pytorch as pl

    class Net(pl.LightningModule):
        def training_step(self, batch, batch_idx):
            args = self.args
            if args.qa_mask != 1:
                loss = self.model(batch).mean()
            else:
                loss = self.model(batch[0]).mean()
                self.masked = batch[1].sum().item()
            return loss
    """
    (f,) = lint_source(textwrap.dedent(src), "net.py", select=["LS201"])
    assert f.line == 11 and "(under `if args.qa_mask != 1:` (line 7))" in f.message
    assert lint_source(textwrap.dedent(src), "net.py", select=["DEFAULT"]) == []


def test_the_sizes_an_autograd_function_hands_its_kernel_are_not_a_loss():
    src = """
    import torch

    class WKV(torch.autograd.Function):
        @staticmethod
        def backward(ctx, gy):
            B = ctx.B
            C = ctx.C
            assert B * C % min(C, 32) == 0
            gw = torch.empty((B, C), device=gy.device)
            wkv_cuda.backward(B, C, gy, gw)
            return gw

    def train(model, loader, opt):
        for x in loader:
            loss = model(x.cuda()).sum()
            loss.backward()
            opt.step()
    """
    assert lint_source(textwrap.dedent(src), "model.py", select=["LS201"]) == []
