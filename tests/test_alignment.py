"""Tests of T23 multiple-of-8: the misalignment check and the padding helpers."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from lightning_speedups.functional.alignment import (
    Misalignment,
    PaddedLinear,
    find_misaligned,
    pad_embedding,
    pad_linear_out,
    round_up,
)


class TinyLM(nn.Module):
    def __init__(self, vocab=50, dim=24, heads=4):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, padding_idx=0)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids):
        x = self.emb(ids)
        return self.head(self.attn(x, x, x, need_weights=False)[0])


def test_find_misaligned_lists_the_right_sizes():
    found = find_misaligned(TinyLM(), batch_size=12, input_shape=(12, 30))
    got = {(f.where, f.what): (f.value, f.suggested) for f in found}
    assert got == {
        ("emb", "num_embeddings"): (50, 56),
        ("attn", "head_dim"): (6, 8),
        ("head", "out_features"): (50, 56),
        ("batch", "batch_size"): (12, 16),
        ("input", "dim 1"): (30, 32),
    }
    assert str(found[-2]) == "batch_size = 12 -> 16"


def test_find_misaligned_convs():
    net = nn.Sequential(
        nn.Conv2d(3, 30, 3),
        nn.Conv2d(30, 30, 3, groups=30),
        nn.Conv2d(30, 64, 1, groups=2),
        nn.ConvTranspose2d(64, 16, 2),
    )
    found = find_misaligned(net, input_shape=(32, 3, 224, 100))
    got = {(f.where, f.what): f.suggested for f in found}
    assert got == {
        ("0", "in_channels"): 8,
        ("0", "out_channels"): 32,
        ("2", "in_channels/groups"): 16,  # 15 per group
        ("input", "dim 3"): 104,
    }  # the depthwise conv is skipped, batch 32 and 224 are aligned
    assert "cuDNN" in next(f for f in found if f.what == "in_channels").note
    assert find_misaligned(net, multiple=1) == []
    assert find_misaligned(nn.Sequential(nn.ReLU()), batch_size=7) == []  # no GEMM: batch irrelevant


def test_find_misaligned_bad_arguments():
    with pytest.raises(ValueError, match="multiple"):
        find_misaligned(nn.Linear(2, 2), multiple=0)
    with pytest.raises(ValueError, match="batch_size"):
        find_misaligned(nn.Linear(2, 2), batch_size=-1)
    with pytest.raises(ValueError, match="input_shape"):
        find_misaligned(nn.Linear(2, 2), input_shape="8x8")
    with pytest.raises(TypeError, match="model"):
        find_misaligned(None)  # type: ignore[arg-type]
    assert isinstance(find_misaligned(nn.Linear(3, 8))[0], Misalignment)
    assert round_up(8) == 8 and round_up(9) == 16


def _check_equal(ref: nn.Module, new: nn.Module, x, real: int | None = None):
    out_r, out_n = ref(x), new(x)
    logits_n = out_n[..., :real] if real is not None else out_n
    torch.testing.assert_close(logits_n, out_r)
    proj = torch.randn_like(out_r)
    (out_r * proj).sum().backward()
    (logits_n * proj).sum().backward()
    return out_r, out_n


def test_pad_linear_out_slice_is_exact():
    torch.manual_seed(0)
    lin = nn.Linear(16, 10)
    padded = pad_linear_out(copy.deepcopy(lin))
    assert isinstance(padded, PaddedLinear) and padded.weight.shape == (16, 16)
    x = torch.randn(4, 16)
    out_r, out_n = _check_equal(lin, padded, x)
    assert out_n.shape == (4, 10)
    torch.testing.assert_close(padded.weight.grad[:10], lin.weight.grad)
    torch.testing.assert_close(padded.bias.grad[:10], lin.bias.grad)
    assert padded.weight.grad[10:].abs().max() == 0
    aligned = nn.Linear(4, 8)
    assert pad_linear_out(aligned) is aligned


def test_pad_linear_out_mask_keeps_softmax_argmax_and_loss():
    torch.manual_seed(0)
    lin = nn.Linear(16, 10)
    padded = pad_linear_out(copy.deepcopy(lin), logits="mask")
    x, y = torch.randn(6, 16), torch.randint(0, 10, (6,))
    out_r, out_n = _check_equal(lin, padded, x, real=10)
    assert out_n.shape == (6, 16) and torch.isinf(out_n[:, 10:]).all()
    torch.testing.assert_close(F.softmax(out_n, -1)[:, :10], F.softmax(out_r, -1))
    assert torch.equal(out_n.argmax(-1), out_r.argmax(-1))
    torch.testing.assert_close(F.cross_entropy(out_n, y), F.cross_entropy(out_r, y))
    # the -inf lives in a non-persistent buffer: AdamW with weight decay keeps the parameters finite
    opt = torch.optim.AdamW(padded.parameters(), lr=0.1, weight_decay=0.1)
    F.cross_entropy(padded(x), y).backward()
    opt.step()
    assert all(torch.isfinite(p).all() for p in padded.parameters())
    assert "logit_mask" not in padded.state_dict()


def test_padded_modules_load_unpadded_checkpoints():
    lin, emb = nn.Linear(8, 10), nn.Embedding(10, 4)
    p_lin, p_emb = pad_linear_out(nn.Linear(8, 10)), pad_embedding(nn.Embedding(10, 4))
    p_lin.load_state_dict(lin.state_dict())
    p_emb.load_state_dict(emb.state_dict())
    x, ids = torch.randn(3, 8), torch.tensor([0, 9, 3])
    torch.testing.assert_close(p_lin(x), lin(x))
    torch.testing.assert_close(p_emb(ids), emb(ids))


def test_pad_embedding_and_whole_model_equal():
    torch.manual_seed(0)
    ref = TinyLM()
    new = copy.deepcopy(ref)
    new.emb = pad_embedding(new.emb)
    new.head = pad_linear_out(new.head)
    assert new.emb.num_embeddings == 56 and new.emb.padding_idx == 0
    assert {(f.where, f.what) for f in find_misaligned(new)} == {("attn", "head_dim")}
    ids = torch.randint(0, 50, (2, 7))
    for mode in (True, False):
        ref.train(mode), new.train(mode)
        ref.zero_grad(), new.zero_grad()
        _check_equal(ref, new, ids)
        torch.testing.assert_close(new.emb.weight.grad[:50], ref.emb.weight.grad)
        torch.testing.assert_close(new.attn.in_proj_weight.grad, ref.attn.in_proj_weight.grad)
    with pytest.raises(TypeError, match="embedding"):
        pad_embedding(nn.Linear(2, 2))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="logits"):
        pad_linear_out(nn.Linear(2, 3), logits="drop")
