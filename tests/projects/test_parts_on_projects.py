"""The parts on the projects' shapes: surgery after configure_model, no workers on a live buffer, conv
bias in a model fx cannot trace whole, refused Trainer flags skipped before the Trainer exists."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn

from lightning_speedups import preset
from lightning_speedups.callbacks import ActivationCheckpointing, ChannelsLast, ConvBiasRemoval, LoaderTuning
from lightning_speedups.functional import remove_conv_bias
from lightning_speedups.functional.conv_bias_plan import plan_conv_bias_removal
from projects.dqn import DQN
from projects.gan import DCGAN
from projects.resnet import ImageClassData
from projects.sharded import LateBuiltCNN
from projects.vggish import VGGish

QUIET = dict(
    accelerator="cpu",
    max_steps=2,
    limit_val_batches=0,
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
)


def test_surgery_reaches_layers_built_in_configure_model():
    model = LateBuiltCNN()
    bias, last = ConvBiasRemoval(), ChannelsLast()
    pl.Trainer(**QUIET, callbacks=[bias, last]).fit(model, datamodule=ImageClassData())
    assert bias.active and bias.removed == ["features.0", "features.4"], bias.status
    assert last.active and model.features[0].weight.is_contiguous(memory_format=torch.channels_last)
    assert model.features[0].bias is None
    # the wrapper is gone after the fit, and a second fit (configure_model a no-op now) still works
    assert "configure_model" not in vars(model)
    pl.Trainer(**QUIET, callbacks=[ConvBiasRemoval()]).fit(model, datamodule=ImageClassData())


def test_checkpointing_after_configure_model_names_the_late_blocks():
    model = LateBuiltCNN()
    cb = ActivationCheckpointing([nn.BatchNorm2d])
    pl.Trainer(**QUIET, callbacks=[cb]).fit(model, datamodule=ImageClassData())
    assert cb.active, cb.status


def test_no_workers_on_a_dataset_sampling_the_models_replay_buffer():
    cb = LoaderTuning(num_workers=2)
    pl.Trainer(**QUIET, callbacks=[cb]).fit(DQN())
    line = cb.choices["train"]
    assert "num_workers=0" in line and "`buffer`" in line and "stale copy" in line, line
    assert "stale copy" in cb.status[1]


def test_conv_bias_in_a_vgg_shaped_model_fx_cannot_trace_whole():
    plan = plan_conv_bias_removal(VGGish())
    assert len(plan.pairs) == 8 and all(c.startswith("features.") for c in plan.pairs), plan.pairs
    # the conv head under the untraceable branch keeps its biases, each with the reason
    assert set(plan.skipped) == {"pre_logits.fc1", "pre_logits.fc2"}
    assert all("untraceable forward of 'pre_logits'" in why for why in plan.skipped.values())
    assert any("cannot be traced" in note for note in plan.notes)
    # the feature-extraction methods that reach into `features` never run in training: said, not searched
    (note,) = [n for n in plan.notes if "training never calls" in n]
    assert "forward_intermediates" in note and "prune_intermediate_layers" in note and "forward_head" not in note
    assert plan.summary() == "8 conv bias(es) folded into BatchNorm, 2 kept"


def test_conv_bias_in_a_vgg_shaped_model_keeps_the_outputs():
    torch.manual_seed(0)
    model, x = VGGish(), torch.randn(4, 3, 32, 32)
    model.train()
    with torch.no_grad():
        model(torch.randn(8, 3, 32, 32))  # running statistics that are not the initial ones
    expected = {}
    for mode in ("train", "eval"):
        getattr(model, mode)()
        with torch.no_grad():
            expected[mode] = model(x)
    assert len(remove_conv_bias(model)) == 8 and model.features[0].bias is None
    for mode in ("eval", "train"):
        getattr(model, mode)()
        with torch.no_grad():
            torch.testing.assert_close(model(x), expected[mode], rtol=1e-5, atol=1e-5)


class _Distiller(pl.LightningModule):
    """A training step that does call the feature-extraction API: the reach into `features` runs."""

    def __init__(self) -> None:
        super().__init__()
        self.net = VGGish()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        _, taps = self.net.forward_intermediates(batch[0])
        return sum(t.mean() for t in taps)


def test_conv_bias_keeps_the_biases_a_called_feature_extraction_method_reads():
    plan = plan_conv_bias_removal(_Distiller())
    assert not plan.pairs, plan.pairs
    assert all("accessed directly" in plan.skipped[f"net.{c}"] for c in ("features.0", "features.4")), plan.skipped


def test_clipping_for_a_gan_is_skipped_before_the_trainer_exists():
    model = DCGAN()
    p = preset("transformer")
    kwargs = p.trainer_kwargs(model=model)
    assert "gradient_clip_val" not in kwargs
    (why,) = [r for n, a, r in p._notes if n.startswith("grad_clip") and not a]
    assert "manual optimization" in why and "self.clip_gradients(opt, gradient_clip_val=1.0" in why
    names = [type(cb).__name__ for cb in p.callbacks()]
    assert "AutomaticOptimizationFlags" not in names
