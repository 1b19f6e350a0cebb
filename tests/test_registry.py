"""The tip registry, and the shared suite every implemented part runs through:
construct, fit two steps, save a checkpoint, resume from it, compose with the other parts."""

from __future__ import annotations

import inspect

import pytest
import torch
from lightning.pytorch.callbacks import Callback

from helpers import TinyCNN, TinyTransformer, quiet_trainer
from lightning_speedups.tips import BY_ID, TIPS, get_tip
from part_settings import PART_SETTINGS


def test_every_tip_of_the_seed_list_is_in_the_registry():
    assert [t.id for t in TIPS] == [f"T{i:02d}" for i in range(1, 25)]
    assert len({t.slug for t in TIPS}) == 24
    assert get_tip("t16") is get_tip("conv-bias") is BY_ID["T16"]
    with pytest.raises(KeyError, match="T01"):
        get_tip("T99")


def test_implemented_tips_have_parts_that_import():
    for tip in TIPS:
        if tip.status == "implemented":
            assert tip.parts, f"{tip.id} is 'implemented' but lists no part"
            tip.resolve_parts()


def test_lint_rules_named_in_the_registry_exist():
    from lightning_speedups.lint import RULES

    codes = {r.code: r.tip for r in RULES}
    for tip in TIPS:
        for ref in tip.parts:
            if ref.startswith("lint:"):
                assert codes.get(ref[5:]) == tip.id, f"{tip.id} names {ref}, which is not a rule of that tip"


def _callback_parts() -> list[str]:
    refs = []
    for tip in TIPS:
        if tip.status != "implemented":
            continue
        for ref, obj in tip.resolve_parts().items():
            if inspect.isclass(obj) and issubclass(obj, Callback):
                refs.append(ref)
    return refs


def test_every_callback_part_has_shared_settings():
    missing = [ref for ref in _callback_parts() if ref not in PART_SETTINGS]
    assert not missing, f"add these parts to tests/part_settings.py: {missing}"


def _model(kind: str):
    return TinyTransformer() if kind == "transformer" else TinyCNN(optimizer="adamw", lr=1e-2, batch_size=16)


@pytest.mark.parametrize("ref", sorted(PART_SETTINGS))
def test_part_fits_saves_and_resumes(ref, tmp_path):
    setting = PART_SETTINGS[ref]
    model = _model(setting.model)
    cb = setting.make()
    trainer = quiet_trainer(max_steps=2, callbacks=[cb], **setting.trainer)
    trainer.fit(model)
    assert trainer.global_step == 2
    if setting.check:
        setting.check(trainer, model, cb)
    ckpt = tmp_path / "part.ckpt"
    trainer.save_checkpoint(ckpt)
    # resume with a fresh callback and a fresh model: two more steps, from where it stopped
    model2 = _model(setting.model)
    cb2 = setting.make()
    trainer2 = quiet_trainer(max_steps=4, callbacks=[cb2], **setting.trainer)
    trainer2.fit(model2, ckpt_path=ckpt)
    assert trainer2.global_step == 4
    if setting.check:
        setting.check(trainer2, model2, cb2)


@pytest.mark.parametrize("kind", ["cnn", "transformer"])
def test_all_parts_compose(kind, tmp_path):
    settings = [s for s in PART_SETTINGS.values() if s.compose and s.model in (kind, "cnn")]
    callbacks = [s.make() for s in settings]
    trainer_kwargs = {}
    for s in settings:
        trainer_kwargs.update(s.trainer)
    model = _model(kind)
    trainer = quiet_trainer(max_steps=2, callbacks=callbacks, **trainer_kwargs)
    trainer.fit(model)
    assert trainer.global_step == 2
    ckpt = tmp_path / "all.ckpt"
    trainer.save_checkpoint(ckpt)
    trainer2 = quiet_trainer(max_steps=4, callbacks=[s.make() for s in settings], **trainer_kwargs)
    trainer2.fit(_model(kind), ckpt_path=ckpt)
    assert trainer2.global_step == 4
    for p in trainer2.lightning_module.parameters():
        assert torch.isfinite(p).all()
