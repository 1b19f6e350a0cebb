"""The projects and what a user's ``user.yaml`` says for each."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Optional

#: Trainer settings of every project run: tiny, quiet, CPU; batches (not optimizer steps) are limited,
#: so a GAN that steps two optimizers per batch runs as many batches as the others.
QUIET: dict[str, Any] = {
    "accelerator": "cpu",
    "devices": 1,
    "max_epochs": 1,
    "limit_train_batches": 2,
    "limit_val_batches": 1,
    "num_sanity_val_steps": 0,
    "logger": False,
    "enable_checkpointing": False,
    "enable_progress_bar": False,
    "enable_model_summary": False,
}


@dataclass(frozen=True)
class Project:
    """One project: its model and data classes (dotted paths), the user's callbacks and Trainer settings."""

    name: str
    model: str
    data: Optional[str] = None
    #: ``(class path, init args)`` of callbacks the project's own Trainer uses
    callbacks: tuple[tuple[str, dict[str, Any]], ...] = ()
    trainer: dict[str, Any] = field(default_factory=dict)
    shape: str = ""

    def trainer_settings(self) -> dict[str, Any]:
        return {**QUIET, **self.trainer}

    @staticmethod
    def _load(path: str) -> Any:
        module, _, name = path.rpartition(".")
        return getattr(importlib.import_module(module), name)

    def build(self) -> tuple[Any, Any]:
        """A fresh model and DataModule (``None`` when the model brings its loaders)."""
        model = self._load(self.model)()
        data = self._load(self.data)() if self.data else None
        return model, data

    def user_callbacks(self) -> list[Any]:
        return [self._load(path)(**kwargs) for path, kwargs in self.callbacks]

    def user_yaml(self) -> dict[str, Any]:
        """What a user writes in ``user.yaml`` to train this project with ``--config PRESET --config user.yaml``."""
        out: dict[str, Any] = {"model": {"class_path": self.model}}
        if self.data:
            out["data"] = {"class_path": self.data}
        trainer = dict(self.trainer_settings())
        if self.callbacks:
            trainer["callbacks"] = [{"class_path": p, "init_args": dict(k)} for p, k in self.callbacks]
        out["trainer"] = trainer
        return out


PROJECTS: dict[str, Project] = {
    p.name: p
    for p in (
        Project(
            "gan",
            "projects.gan.DCGAN",
            "projects.gan.ImageData",
            shape="DCGAN: manual optimization, two optimizers ([opt_g, opt_d], []), the user's pin_memory=True on CPU",
        ),
        Project(
            "unet",
            "projects.unet.UNet",
            "projects.unet.SegmentationData",
            shape="UNet segmentation: dict batches, training_step returns a dict, the user's own loader worker",
        ),
        Project(
            "resnet",
            "projects.resnet.ResNetClassifier",
            "projects.resnet.ImageClassData",
            shape="ResNet classifier: datasets built in setup, ([opt], [scheduler dict, frequency 2]), epoch-end logging",
        ),
        Project(
            "lm",
            "projects.lm.LanguageModel",
            "projects.lm.TinyTextData",
            shape="language model on lightning.pytorch.demos.Transformer, dict with lr_scheduler interval step",
        ),
        Project(
            "autoencoder",
            "projects.autoencoder.AutoEncoder",
            "projects.autoencoder.FlatImageData",
            shape="autoencoder: manual optimization with one optimizer and a scheduler stepped by hand, on_epoch logging",
        ),
        Project(
            "dqn",
            "projects.dqn.DQN",
            shape="DQN: an IterableDataset (no __len__) sampling a replay buffer that training_step fills",
        ),
        Project(
            "configure_model",
            "projects.sharded.LateBuiltCNN",
            "projects.resnet.ImageClassData",
            shape="layers built in configure_model, lr_scheduler interval epoch / frequency 1",
        ),
        Project(
            "finetune",
            "projects.finetune.FineTuner",
            "projects.resnet.ImageClassData",
            callbacks=(("lightning.pytorch.callbacks.BackboneFinetuning", {"unfreeze_backbone_at_epoch": 1}),),
            trainer={"max_epochs": 2},
            shape="frozen backbone unfrozen by Lightning's BackboneFinetuning at epoch 1",
        ),
        # issue 22: shapes of fresh public modules (self-supervised, config-driven, input gradients)
        Project(
            "momentum_twins",
            "projects.selfsup.MomentumTwins",
            "projects.selfsup.UnlabelledData",
            shape="BYOL-style twins: momentum encoder updated in on_train_batch_end, LARS, warm-up-cosine dict"
            " interval step, a config object in hparams, two validation loaders, a torchmetrics object logged",
        ),
        Project(
            "student_teacher",
            "projects.selfsup.StudentTeacher",
            "projects.selfsup.UnlabelledData",
            shape="DINO-style student / frozen teacher (EMA in on_train_batch_end), a centre buffer updated each step",
        ),
        Project(
            "hydra_classifier",
            "projects.configured.HydraClassifier",
            "projects.configured.DigitsLike",
            shape="Hydra-template classifier: functools.partial optimizer and scheduler, a dataclass config and a"
            " user class in hparams; torchmetrics objects logged; two validation loaders; a monitored scheduler",
        ),
        Project(
            "course_transformer",
            "projects.configured.CourseTransformer",
            "projects.configured.ParityData",
            trainer={"gradient_clip_val": 0.5, "gradient_clip_algorithm": "norm"},
            shape="course Transformer: the user's own norm clipping in their Trainer, a warm-up set by hand in an"
            " optimizer_step override",
        ),
        Project(
            "energy",
            "projects.energy.EnergyModel",
            "projects.energy.UnlabelledVectors",
            shape="energy-based model: a sampler toggles requires_grad of the parameters around input-gradient"
            " Langevin steps, a replay buffer that grows every step",
        ),
        Project(
            "adversarial",
            "projects.energy.AdversarialClassifier",
            "projects.energy.VectorData",
            shape="FGSM adversarial training: torch.autograd.grad of the loss w.r.t. the input inside training_step",
        ),
    )
}
