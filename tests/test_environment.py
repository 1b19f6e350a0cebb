"""Issue 27: the pack inside Trainers it did not build, in both Lightning packages.

- ``LIGHTNING_SPEEDUPS`` applies presets through Lightning's callback entry points (both groups), unset it
  changes nothing, a bad value stops before training with one line, nothing is added twice;
- a Trainer flag whose value means "off" does not block a preset; one that turns something on wins;
- ``trainer_kwargs(...)`` returns every key it was given;
- the start-up probe decides from the plan before it spends a step;
- a callback of the other Lightning package is named with the fix.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import subprocess
import sys
from typing import Any

import pytest
import torch
from helpers import QUIET
from torch.utils.data import DataLoader, TensorDataset

from lightning_speedups.callbacks import SpeedupCallback, SpeedupsSummary
from lightning_speedups.callbacks.from_environment import SpeedupsFromEnvironment
from lightning_speedups.environment import ENV_VAR, callbacks_factory, preset_from_environment
from lightning_speedups.presets import preset
from lightning_speedups.trainer.namespace import MixedLightningError, is_overridden, namespace_of

pl_old = pytest.importorskip("pytorch_lightning", reason="pytorch-lightning is in the test extra (both namespaces)")
NAMESPACES = ["lightning.pytorch", "pytorch_lightning"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def module_class(ns: str, clip_in_step: bool = False) -> type:
    """A small conv -> BatchNorm classifier built on ``ns``'s LightningModule, recording its losses."""
    pl = importlib.import_module(ns)

    class Net(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(
                torch.nn.Conv2d(1, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Flatten(), torch.nn.Linear(144, 2)
            )
            self.losses: list[float] = []
            self.seen: dict[str, Any] = {}

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self.net(x), y)
            self.losses.append(float(loss.detach()))
            t = self.trainer
            self.seen = {
                "precision": t.precision,
                "gradient_clip_val": t.gradient_clip_val,
                "autocast": torch.is_autocast_enabled("cpu"),
            }
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self) -> DataLoader:
            g = torch.Generator().manual_seed(0)
            data = TensorDataset(torch.randn(64, 1, 8, 8, generator=g), torch.randint(0, 2, (64,), generator=g))
            return DataLoader(data, batch_size=8)

    return Net


def trainer_of(ns: str, **kwargs: Any) -> Any:
    pl = importlib.import_module(ns)
    return pl.Trainer(**{**QUIET, "max_steps": 3, **kwargs})


def summary_lines(trainer: Any) -> list[str]:
    return next(cb.lines for cb in trainer.callbacks if isinstance(cb, SpeedupsSummary))


def fit(ns: str, seed: int = 0, **kwargs: Any) -> tuple[Any, Any]:
    torch.manual_seed(seed)
    model = module_class(ns)()
    trainer = trainer_of(ns, **kwargs)
    trainer.fit(model)
    return trainer, model


# ------------------------------------------------------------------------------------------ entry points
def test_both_callback_entry_point_groups_name_the_factory():
    for group in ("lightning.pytorch.callbacks_factory", "pytorch_lightning.callbacks_factory"):
        found = [ep for ep in importlib.metadata.entry_points(group=group) if ep.value.startswith("lightning_speedups")]
        assert found, f"no lightning_speedups entry point in {group}: is the package installed (pip install -e .)?"
        assert found[0].load() is callbacks_factory


@pytest.mark.parametrize("ns", NAMESPACES)
def test_unset_the_pack_changes_nothing(ns, monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert callbacks_factory() == []
    trainer, model = fit(ns)
    assert not [cb for cb in trainer.callbacks if type(cb).__module__.startswith("lightning_speedups")]
    assert len(model.losses) == 3 and model.seen["precision"] == "32-true"
    monkeypatch.setenv(ENV_VAR, "  ")  # set empty: switched off, not an error
    assert callbacks_factory() == []


@pytest.mark.parametrize("ns", NAMESPACES)
def test_set_the_preset_applies_to_a_trainer_the_script_builds(ns, monkeypatch):
    monkeypatch.setenv(ENV_VAR, "memory")
    trainer, model = fit(ns)
    kinds = [type(cb).__name__ for cb in trainer.callbacks]
    assert kinds.count("SpeedupsFromEnvironment") == 1 and "SpeedupsSummary" in kinds
    lines = summary_lines(trainer)
    env_line = next(line for line in lines if "environment" in line)
    assert f"{ENV_VAR}=memory" in env_line and f"this {ns} Trainer" in env_line
    # the memory preset's bf16 autocast (decided for this CPU) ran inside the training step, as the summary says
    said_bf16 = any(line.startswith("  on ") and "precision (T05)" in line and "bf16-mixed" in line for line in lines)
    assert said_bf16 == (model.seen["precision"] == "bf16-mixed") == model.seen["autocast"], (lines, model.seen)
    # the memory preset's other part is in the Trainer and decided (no repeated blocks in this model)
    part = next(cb for cb in trainer.callbacks if type(cb).__name__ == "ActivationCheckpointing")
    assert part.status is not None and any("activation_checkpointing" in line for line in lines)


@pytest.mark.parametrize("ns", NAMESPACES)
def test_presets_compose_with_plus_and_a_yaml_path_works(ns, monkeypatch, tmp_path):
    monkeypatch.setenv(ENV_VAR, "fast+converge")
    trainer, _ = fit(ns)
    kinds = {type(cb).__name__ for cb in trainer.callbacks}
    assert {"LRSchedule", "ConvBiasRemoval", "FusedOptimizer"} <= kinds  # converge's and fast's parts
    own = tmp_path / "mine.yaml"
    own.write_text("speedups:\n  conv_bias: true\n")
    monkeypatch.setenv(ENV_VAR, str(own))
    trainer, model = fit(ns)
    line = next(line for line in summary_lines(trainer) if "conv_bias" in line)
    assert line.startswith("  on ") and not any(
        m.bias is not None for m in model.modules() if isinstance(m, torch.nn.Conv2d)
    )


@pytest.mark.parametrize("value", ["fsat", "fast+", "fast+nope", "fast+ +converge"])
def test_a_bad_value_stops_before_training_with_one_line(value, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import lightning.pytorch as pl\npl.Trainer(accelerator='cpu', logger=False)\nprint('TRAINING STARTED')\n"
    )
    env = {**os.environ, ENV_VAR: value}
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "TRAINING STARTED" not in out.stdout
    errors = [line for line in out.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and "Traceback" not in out.stderr, out.stderr
    assert ENV_VAR in errors[0] and repr(value) in errors[0] and "fast, fsdp, memory" in errors[0]


def test_a_bad_setting_in_a_yaml_names_the_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("speedups:\n  grad_clip:\n    value: -1\n")
    with pytest.raises(ValueError, match=r"LIGHTNING_SPEEDUPS=.*speedups\.grad_clip\.value"):
        preset_from_environment(str(bad))


@pytest.mark.parametrize("ns", NAMESPACES)
def test_nothing_is_added_twice_beside_the_packs_own_callbacks(ns, monkeypatch):
    monkeypatch.setenv(ENV_VAR, "fast")
    p = preset("cnn")
    trainer, _ = fit(ns, callbacks=p.callbacks())
    env = next(cb for cb in trainer.callbacks if isinstance(cb, SpeedupsFromEnvironment))
    assert env.added == [] and env.status is not None and env.status[0] == "skipped"
    assert "nothing added" in env.status[1]
    kinds = [type(cb).__name__ for cb in trainer.callbacks if isinstance(cb, SpeedupCallback)]
    assert len(kinds) == len(set(kinds)), kinds


def test_nothing_is_added_to_a_trainer_the_cli_built(monkeypatch, tmp_path):
    from lightning_speedups.session import SpeedupsCLI, resolve_config_args

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(ENV_VAR, "memory")
    argv = resolve_config_args(["--config", "fast", "--trainer.max_steps", "1", "--trainer.logger", "false"])
    cli = SpeedupsCLI(args=argv, run=False, save_config_callback=None)
    env = next(cb for cb in cli.trainer.callbacks if isinstance(cb, SpeedupsFromEnvironment))
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    assert env.added == [] and env.status is not None and "CLI" in env.status[1]
    kinds = [type(cb).__name__ for cb in cli.trainer.callbacks if isinstance(cb, SpeedupCallback)]
    assert len(kinds) == len(set(kinds)), kinds
    assert "ActivationCheckpointing" not in kinds  # memory's part: not added to fast's CLI Trainer


@pytest.mark.parametrize("ns", NAMESPACES)
def test_a_second_fit_of_the_same_trainer_builds_the_parts_once(ns, monkeypatch):
    monkeypatch.setenv(ENV_VAR, "fast")
    torch.manual_seed(0)
    trainer = trainer_of(ns)
    trainer.fit(module_class(ns)())
    first = len(trainer.callbacks)
    trainer.fit(module_class(ns)())
    assert len(trainer.callbacks) == first


# ---------------------------------------------------------------------------------- "off" does not block
@pytest.mark.parametrize("ns", NAMESPACES)
def test_a_library_default_that_means_off_does_not_block_clipping(ns, monkeypatch):
    monkeypatch.setenv(ENV_VAR, "transformer")
    trainer, model = fit(ns, gradient_clip_val=0.0)
    assert model.seen["gradient_clip_val"] == 1.0
    line = next(line for line in summary_lines(trainer) if "grad_clip" in line)
    assert line.startswith("  on ")
    assert any("gradient_clip_val=0.0 from the Trainer means off" in line for line in summary_lines(trainer))


@pytest.mark.parametrize("ns", NAMESPACES)
def test_a_value_that_turns_clipping_on_wins_and_the_summary_says_so(ns, monkeypatch):
    monkeypatch.setenv(ENV_VAR, "transformer")
    trainer, model = fit(ns, gradient_clip_val=0.5)
    assert model.seen["gradient_clip_val"] == 0.5
    line = next(line for line in summary_lines(trainer) if "grad_clip" in line)
    assert line.startswith("  off ") and "kept trainer.gradient_clip_val=0.5" in line


@pytest.mark.parametrize("ns", NAMESPACES)
def test_the_deferred_clip_part_from_python_treats_off_alike(ns):
    p = preset("transformer")
    trainer, model = fit(ns, **p.trainer_kwargs(), callbacks=p.callbacks(), gradient_clip_val=0.0)
    assert model.seen["gradient_clip_val"] == 1.0
    lines = summary_lines(trainer)
    assert any("grad_clip (T15)" in line and line.startswith("  on ") for line in lines)
    assert not any("(T15) (T15)" in line for line in lines)


@pytest.mark.parametrize("ns", NAMESPACES)
def test_a_value_the_user_passes_to_trainer_kwargs_is_their_choice_even_off(ns):
    p = preset("transformer")
    trainer, model = fit(ns, **p.trainer_kwargs(gradient_clip_val=0.0), callbacks=p.callbacks())
    assert model.seen["gradient_clip_val"] == 0.0
    line = next(line for line in summary_lines(trainer) if "grad_clip (T15)" in line)
    assert line.startswith("  off ") and "kept trainer.gradient_clip_val=0.0" in line, line


def test_trainer_kwargs_returns_every_key_it_was_given():
    p = preset("fast")
    kwargs = p.trainer_kwargs(accelerator="cpu", devices=1, gradient_clip_val=0.0)
    assert kwargs["accelerator"] == "cpu" and kwargs["devices"] == 1 and kwargs["gradient_clip_val"] == 0.0


# ------------------------------------------------------------------------------------------------ probe
@pytest.mark.parametrize("ns", NAMESPACES)
def test_the_probe_decides_from_the_plan_before_it_spends_a_step(ns):
    p = preset("fast")
    trainer, model = fit(ns, callbacks=p.callbacks(), max_steps=3)
    probe = next(cb for cb in trainer.callbacks if type(cb).__name__ == "AutoProbe")
    assert probe.result is not None and probe.result.steps == 0, probe.result
    assert "too short" in probe.result.skipped and "nothing was run" in probe.result.skipped
    assert len(model.losses) == 3  # the model ran only its own three training steps


# -------------------------------------------------------------------------------------------- namespaces
@pytest.mark.parametrize("ns", NAMESPACES)
def test_override_checks_work_for_both_packages(ns):
    Net = module_class(ns)
    assert namespace_of(Net()) == ns
    assert is_overridden("training_step", Net()) and not is_overridden("configure_model", Net())


@pytest.mark.parametrize("path", ["environment", "callbacks"])
def test_a_callback_of_the_other_package_is_named_with_the_fix(path, monkeypatch):
    import lightning.pytorch as new

    early = new.callbacks.EarlyStopping(monitor="loss")
    model = module_class("pytorch_lightning")()
    if path == "environment":
        monkeypatch.setenv(ENV_VAR, "fast")
        trainer = trainer_of("pytorch_lightning", callbacks=[early])
    else:
        monkeypatch.delenv(ENV_VAR, raising=False)
        trainer = trainer_of("pytorch_lightning", callbacks=[early, *preset("fast").callbacks()])
    with pytest.raises(MixedLightningError) as err:
        trainer.fit(model)
    text = str(err.value)
    assert "\n" not in text and "EarlyStopping" in text and "import it from `pytorch_lightning`" in text
    assert model.losses == []  # before training


def test_a_plain_callback_of_the_other_package_works_and_is_not_refused(monkeypatch):
    import lightning.pytorch as new

    class Counter(new.Callback):
        calls = 0

        def on_train_batch_end(self, *args: Any) -> None:
            Counter.calls += 1

    monkeypatch.setenv(ENV_VAR, "fast")
    fit("pytorch_lightning", callbacks=[Counter()])
    assert Counter.calls == 3


@pytest.mark.parametrize("ns", NAMESPACES)
def test_validate_after_fit_runs_as_plain_lightning(ns, monkeypatch):
    monkeypatch.setenv(ENV_VAR, "memory")
    torch.manual_seed(0)
    model = module_class(ns)()
    model.validation_step = lambda *args, **kwargs: None  # type: ignore[method-assign]
    model.val_dataloader = model.train_dataloader  # type: ignore[method-assign]
    trainer = trainer_of(ns, limit_val_batches=1)
    trainer.fit(model)
    during_fit = trainer.precision
    trainer.validate(model, verbose=False)
    env = next(cb for cb in trainer.callbacks if isinstance(cb, SpeedupsFromEnvironment))
    assert env.added == [] and "validate run" in env.status[1]
    assert trainer.precision == "32-true" and during_fit in ("bf16-mixed", "32-true")
    assert not [cb for cb in trainer.callbacks if isinstance(cb, SpeedupsSummary)]


def test_the_environment_callback_and_a_pytorch_lightning_strategy_pickle():
    import pickle

    from lightning_speedups.environment import _from_environment
    from lightning_speedups.strategies import ddp_strategy

    cb = pickle.loads(pickle.dumps(_from_environment(preset("fast", "converge"), "fast+converge")))
    assert cb.preset.parts() == preset("fast", "converge").parts()
    strategy, _ = ddp_strategy(accelerator="cpu", namespace="pytorch_lightning")
    again = pickle.loads(pickle.dumps(strategy))
    assert type(again) is type(strategy) and namespace_of(again) == "pytorch_lightning"
    assert again._ddp_kwargs == strategy._ddp_kwargs


def test_the_packs_callbacks_themselves_work_in_either_trainer():
    p = preset("fast")
    for ns in NAMESPACES:
        trainer, model = fit(ns, callbacks=p.callbacks())
        assert len(model.losses) == 3
        assert next(cb for cb in trainer.callbacks if type(cb).__name__ == "ConvBiasRemoval").active


# ------------------------------------------------------------------------------- commands on either package
PL_MODULE = """
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


class OldStyleNet(pl.LightningModule):
    def __init__(self, lr: float = 0.01) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(1, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Flatten(), torch.nn.Linear(144, 2)
        )

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.get("lr", 0.01))

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        return DataLoader(TensorDataset(torch.randn(32, 1, 8, 8, generator=g), torch.randint(0, 2, (32,), generator=g)), batch_size=8)
"""


def _old_style_project(tmp_path: Any) -> str:
    (tmp_path / "oldstyle.py").write_text(PL_MODULE)
    config = tmp_path / "user.yaml"
    config.write_text(
        "model:\n  class_path: oldstyle.OldStyleNet\ntrainer:\n  max_steps: 3\n  logger: false\n"
        "  enable_checkpointing: false\n  enable_progress_bar: false\n"
    )
    return str(config)


def test_fit_runs_a_pytorch_lightning_module_on_that_packages_cli(tmp_path, monkeypatch):
    from lightning_speedups.session import SpeedupsCLI, resolve_config_args

    config = _old_style_project(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(ENV_VAR, raising=False)
    cli = SpeedupsCLI(
        args=resolve_config_args(["fit", "--config", config, "--config", "fast"]), save_config_callback=None
    )
    assert namespace_of(cli.trainer) == "pytorch_lightning" and namespace_of(cli.model) == "pytorch_lightning"
    assert cli.trainer.global_step == 3
    conv = next(cb for cb in cli.trainer.callbacks if type(cb).__name__ == "ConvBiasRemoval")
    assert conv.active and cli.model.net[0].bias is None


@pytest.mark.slow
def test_doctor_reads_a_pytorch_lightning_module(tmp_path):
    import json

    config = _old_style_project(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    out = subprocess.run(
        [sys.executable, "-m", "lightning_speedups", "doctor", "--config", config, "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    findings = json.loads(out.stdout)["findings"]
    conv = next(f for f in findings if f["tip"] == "T16")
    assert "Conv2d" in json.dumps(conv), conv


@pytest.mark.parametrize("ns", NAMESPACES)
def test_a_setting_fixed_at_construction_is_named_not_claimed(ns, monkeypatch):
    monkeypatch.setenv(ENV_VAR, "ddp")
    trainer, model = fit(ns)
    assert type(trainer.strategy).__name__ == "SingleDeviceStrategy" and len(model.losses) == 3
    line = next(line for line in summary_lines(trainer) if "ddp (T11)" in line)
    assert line.startswith("  off ") and "not applied" in line and "strategy" in line, line


@pytest.mark.parametrize("ns", NAMESPACES)
def test_schedule_free_from_a_yaml_swaps_the_optimizer_of_a_trainer_the_script_builds(ns, monkeypatch, tmp_path):
    """Issue 37 item 2 through the environment: `speedups.schedule_free` in a YAML given as LIGHTNING_SPEEDUPS turns
    a script's Adam into AdamWScheduleFree (train mode while it trains), in either Lightning package."""
    seen: list[tuple[str, bool]] = []

    class AdamNet(module_class(ns)):  # type: ignore[misc]
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            opt = self.trainer.optimizers[0]
            seen.append((type(opt).__name__, bool(opt.param_groups[0].get("train_mode", False))))
            return super().training_step(batch, batch_idx)

        def configure_optimizers(self) -> Any:
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    own = tmp_path / "sf.yaml"
    own.write_text("speedups:\n  schedule_free:\n    enabled: true\n")
    monkeypatch.setenv(ENV_VAR, str(own))
    torch.manual_seed(0)
    trainer = trainer_of(ns)
    trainer.fit(AdamNet())
    assert seen and all(name == "AdamWScheduleFree" and train for name, train in seen), seen
    line = next(line for line in summary_lines(trainer) if "schedule_free" in line)
    assert line.startswith("  on "), line
