"""Fix texts that depend on context say so: a loader with a collate_fn (an object of another class is
pinned only if it defines pin_memory()), workers for a loader built at module level (the main guard), DDP
for a batch-wide loss (gather the features), a gradient dropped instead of zeroed (readers must skip None)."""

from __future__ import annotations

from lightning_speedups.lint import lint_source

LOADERS = """\
import torch
from torch.utils.data import DataLoader

import utils

plain = DataLoader(ds, batch_size=2, num_workers=2)
detection = DataLoader(ds, batch_sampler=sampler, collate_fn=utils.collate_fn, num_workers=2)
default = DataLoader(ds, batch_size=2, collate_fn=None, num_workers=2)
x = batch.cuda()
"""


def test_loader_with_a_collate_fn_names_what_pinning_needs():
    fixes = {f.line: f.fix for f in lint_source(LOADERS, select=["LS103"])}
    assert set(fixes) == {6, 7, 8}
    assert fixes[6] == fixes[8] and fixes[6].startswith("pin_memory=True (only when training on a GPU)")
    assert all("non_blocking=True" in fix for fix in fixes.values())  # pinning pays with a non-blocking copy
    assert "collate_fn=utils.collate_fn" in fixes[7] and "defines pin_memory()" in fixes[7]


SCRIPT_LOADERS = """import torch

train_loader = torch.utils.data.DataLoader(train_set, batch_size=100, shuffle=True)


def make_loader(ds):
    return torch.utils.data.DataLoader(ds, batch_size=100)


if __name__ == "__main__":
    test_loader = torch.utils.data.DataLoader(test_set, batch_size=100)
    print([x.cuda().sum() for x, _ in test_loader])
for images, labels in train_loader:
    images = images.cuda()
"""


def test_workers_for_a_loader_built_at_module_level_need_the_main_guard():
    # a tutorial script without `if __name__ == "__main__":`: spawned workers would import it again
    fixes = {f.line: f.fix for f in lint_source(SCRIPT_LOADERS, select=["LS102"])}
    assert set(fixes) == {3, 7, 11}
    assert '`if __name__ == "__main__":`' in fixes[3] and "spawn" in fixes[3]
    assert "__main__" not in fixes[7] and "__main__" not in fixes[11]


def test_ddp_fix_says_a_batch_wide_loss_needs_gathered_features():
    (finding,) = lint_source("import torch\nmodel = torch.nn.DataParallel(model)\n", select=["LS301"])
    assert "torchrun" in finding.fix and 'Trainer(strategy="ddp"' in finding.fix
    assert "all_gather" in finding.fix  # a contrastive loss over the whole batch must stay the same


FP16_ZERO_GRAD = """\
import torch


def zero_grad(model_params):
    for param in model_params:
        if param.grad is not None:
            param.grad.detach_()
            param.grad.zero_()


def model_grads_to_master_grads(model_params, master_params):
    master_params[0].grad = torch.cat([p.grad.data.detach().float().view(-1) for p in model_params])
"""


def test_grad_dropped_instead_of_zeroed_says_readers_must_skip_none():
    (finding,) = lint_source(FP16_ZERO_GRAD, select=["LS303"])
    assert finding.line == 8
    assert finding.fix.startswith("p.grad = None")
    assert "skip a parameter whose grad is None" in finding.fix


KEY_VALUE_LOG = """\
import logging

import torch

logger = logging.getLogger(__name__)
DEVICE = torch.device("cuda")


def update(critic, optimizer, obs, target, run_logger, step):
    loss = torch.nn.functional.mse_loss(critic(obs), target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    logger.info("critic loss %s", loss)
    run_logger.log("train/critic_loss", loss, step)
"""


def test_a_key_and_value_logging_call_is_not_called_a_percent_format():
    messages = {f.line: f.message for f in lint_source(KEY_VALUE_LOG, select=["LS204"])}
    assert set(messages) == {14, 15}
    assert "(a %-format)" in messages[14]
    assert "(a %-format)" not in messages[15] and "a key and a value" in messages[15]


BOUND_RANDOM = """\
import torch


def sample_z(model, shape, n_c):
    idx = torch.empty(shape, dtype=torch.long)
    idx = idx.random_(n_c).cuda()
    return model(idx)


def train(model, loader, opt):
    for x in loader:
        loss = sample_z(model, x.shape[0], 10).mean()
        loss.backward()
        opt.step()
"""


def test_a_random_fill_after_the_binding_says_the_stream_changes():
    (finding,) = lint_source(BOUND_RANDOM, select=["LS203"])
    assert finding.line == 6 and "(line 5)" in finding.fix
    assert "device's generator" in finding.message and "CPU-seeded" in finding.fix
