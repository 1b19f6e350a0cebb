"""A DQN: the agent plays in ``training_step`` and fills a replay buffer that an ``IterableDataset`` samples.

The loader's dataset holds the same buffer object as the LightningModule: a worker process would
sample a copy frozen when it started, never the experience gathered since.
"""

from __future__ import annotations

import random
from collections import deque, namedtuple
from collections.abc import Iterator
from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, IterableDataset

Experience = namedtuple("Experience", ["state", "action", "reward", "done", "new_state"])


class Corridor:
    """A 1-D corridor of ``length`` cells: move left or right, reward 1 at the right end."""

    def __init__(self, length: int = 6, seed: int = 0) -> None:
        self.length = length
        self.rng = random.Random(seed)
        self.pos = 0

    def observe(self) -> torch.Tensor:
        obs = torch.zeros(self.length)
        obs[self.pos] = 1.0
        return obs

    def reset(self) -> torch.Tensor:
        self.pos = self.rng.randrange(self.length - 1)
        return self.observe()

    def step(self, action: int) -> tuple[torch.Tensor, float, bool]:
        self.pos = max(0, min(self.length - 1, self.pos + (1 if action == 1 else -1)))
        done = self.pos == self.length - 1
        return self.observe(), float(done), done


class ReplayBuffer:
    def __init__(self, capacity: int) -> None:
        self.buffer: deque[Experience] = deque(maxlen=capacity)

    def __len__(self) -> int:
        return len(self.buffer)

    def append(self, experience: Experience) -> None:
        self.buffer.append(experience)

    def sample(self, n: int) -> list[Experience]:
        return random.sample(list(self.buffer), min(n, len(self.buffer)))


class RLDataset(IterableDataset):
    """Yields ``sample_size`` experiences drawn from the buffer as it is when iteration starts."""

    def __init__(self, buffer: ReplayBuffer, sample_size: int = 8) -> None:
        self.buffer = buffer
        self.sample_size = sample_size

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        for exp in self.buffer.sample(self.sample_size):
            yield exp.state, exp.action, exp.reward, exp.done, exp.new_state


class Agent:
    def __init__(self, env: Corridor, buffer: ReplayBuffer) -> None:
        self.env = env
        self.buffer = buffer
        self.state = env.reset()

    @torch.no_grad()
    def play_step(self, net: nn.Module, epsilon: float) -> tuple[float, bool]:
        if random.random() < epsilon:
            action = random.randrange(2)
        else:
            param = next(net.parameters())
            action = int(net(self.state.to(param.device, param.dtype).unsqueeze(0)).argmax(1))
        new_state, reward, done = self.env.step(action)
        self.buffer.append(Experience(self.state, action, reward, done, new_state))
        self.state = self.env.reset() if done else new_state
        return reward, done


class DQN(pl.LightningModule):
    def __init__(
        self,
        length: int = 6,
        batch_size: int = 4,
        sample_size: int = 8,
        lr: float = 1e-2,
        gamma: float = 0.9,
        sync_rate: int = 4,
        warm_start: int = 16,
        epsilon: float = 0.3,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        random.seed(0)
        self.net = nn.Sequential(nn.Linear(length, 16), nn.ReLU(), nn.Linear(16, 2))
        self.target_net = nn.Sequential(nn.Linear(length, 16), nn.ReLU(), nn.Linear(16, 2))
        self.target_net.load_state_dict(self.net.state_dict())
        self.buffer = ReplayBuffer(64)
        self.agent = Agent(Corridor(length), self.buffer)
        for _ in range(warm_start):
            self.agent.play_step(self.net, epsilon=1.0)
        self.last_loss: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def dqn_loss(self, batch: Any) -> torch.Tensor:
        states, actions, rewards, dones, next_states = batch
        q = self.net(states).gather(1, actions.long().unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            nxt = self.target_net(next_states).max(1)[0]
            nxt[dones.bool()] = 0.0
            expected = rewards.to(nxt.dtype) + self.hparams.gamma * nxt
        return F.mse_loss(q, expected.to(q.dtype))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        reward, done = self.agent.play_step(self.net, self.hparams.epsilon)  # fills the buffer the loader samples
        loss = self.dqn_loss(batch)
        if self.global_step % self.hparams.sync_rate == 0:
            self.target_net.load_state_dict(self.net.state_dict())
        self.log_dict({"train_loss": loss, "reward": reward, "buffer": float(len(self.buffer))})
        self.last_loss = loss.detach()
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.net.parameters(), lr=self.hparams.lr)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(RLDataset(self.buffer, self.hparams.sample_size), batch_size=self.hparams.batch_size)
