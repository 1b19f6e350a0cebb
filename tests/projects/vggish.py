"""A model in the shape of timm's ``vgg11_bn`` (written for this test): what makes fx give up on it whole.

- ``features`` is a plain ``nn.Sequential`` of conv (with bias) -> BatchNorm -> ReLU, and max-pools;
- the pre-logits block is a conv MLP whose forward branches on the input's spatial size (fx cannot
  trace ``if x.shape[-2] < k``), so the whole model cannot be traced;
- ``forward_features`` may hand ``self.features`` to a checkpointing helper instead of calling it;
- ``init_weights`` walks ``self.modules()`` and reads ``m.bias``;
- ``feature_info`` and ``group_matcher`` name layers of ``features`` in strings (``"features.4"``,
  ``r"^features\.(\d+)"``) for feature extraction and layer-wise learning rates;
- ``forward_intermediates`` and ``prune_intermediate_layers`` (feature-extraction APIs that a plain
  training step never calls) slice ``self.features`` and call its layers one by one: that reach into
  ``features`` is what kept every bias of the real ``vgg11_bn``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Union

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint_sequential

#: vgg11's layout (8 convs), channels divided by 32
CFG: Sequence[Union[int, str]] = (2, "M", 4, "M", 8, 8, "M", 16, 16, "M", 16, 16, "M")


class ConvHead(nn.Module):
    """Conv MLP pre-logits: a ``k x k`` conv then a 1x1 conv; pads small inputs up to ``k`` first."""

    def __init__(self, cin: int, hidden: int, k: int = 2) -> None:
        super().__init__()
        self.k = k
        self.fc1 = nn.Conv2d(cin, hidden, k, bias=True)
        self.act1 = nn.ReLU(True)
        self.fc2 = nn.Conv2d(hidden, hidden, 1, bias=True)
        self.act2 = nn.ReLU(True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-2] < self.k or x.shape[-1] < self.k:  # shape-dependent control flow: fx stops here
            x = F.adaptive_avg_pool2d(x, (max(self.k, x.shape[-2]), max(self.k, x.shape[-1])))
        return self.act2(self.fc2(self.act1(self.fc1(x))))


class VGGish(nn.Module):
    def __init__(self, cfg: Sequence[Union[int, str]] = CFG, classes: int = 10, hidden: int = 16) -> None:
        super().__init__()
        self.grad_checkpointing = False
        self.feature_info: list[dict[str, Any]] = []
        layers: list[nn.Module] = []
        cin = 3
        for v in cfg:
            if v == "M":
                self.feature_info.append({"num_chs": cin, "module": f"features.{len(layers) - 1}"})
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(cin, int(v), 3, padding=1), nn.BatchNorm2d(int(v)), nn.ReLU(True)]
                cin = int(v)
        self.features = nn.Sequential(*layers)
        self.pre_logits = ConvHead(cin, hidden)
        self.head = nn.Linear(hidden, classes)
        self.init_weights()

    def init_weights(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                if m.bias is not None:
                    nn.init.normal_(m.bias, std=0.1)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    @torch.jit.ignore
    def group_matcher(self, coarse: bool = False) -> dict[str, Any]:
        """Parameter groups by layer (the stem, then each block), as regular expressions over names."""
        return {"stem": r"^features\.0", "blocks": r"^features\.(\d+)"}

    def forward_intermediates(self, x: torch.Tensor, stop_at: int = -1) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The output of each stage (before its max-pool) beside the final features."""
        ends = [int(str(info["module"]).split(".")[1]) for info in self.feature_info]
        layers = self.features if stop_at < 0 else self.features[: ends[stop_at] + 1]
        taps = []
        for i, layer in enumerate(layers):
            x = layer(x)
            if i in ends:
                taps.append(x)
        return x, taps

    def prune_intermediate_layers(self, keep: int) -> None:
        """Drop the layers after stage ``keep`` and the head (a backbone for a detector)."""
        end = int(str(self.feature_info[keep]["module"]).split(".")[1])
        self.features = self.features[: end + 1]
        self.pre_logits, self.head = nn.Identity(), nn.Identity()  # type: ignore[assignment]

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        if self.grad_checkpointing and torch.is_grad_enabled():
            return checkpoint_sequential(self.features, 2, x, use_reentrant=False)
        return self.features(x)

    def forward_head(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pre_logits(x)
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    def forward(self, x: torch.Tensor) -> Any:
        return self.forward_head(self.forward_features(x))
