"""Engine test fixtures: a tiny random-weight model on CPU and a scripted in-process dispatcher."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest
import torch

from worker.model.attention import SdpaBackend
from worker.model.config import ModelConfig
from worker.model.llama import LlamaModel
from worker.dispatch import DispatcherClosed, SequenceTooLong


@dataclass(frozen=True)
class FakeBin:
    slot: int
    input_ids: torch.Tensor
    position_ids: torch.Tensor
    cu_seqlens: torch.Tensor
    seq_ids: torch.Tensor
    seq_lens: torch.Tensor
    last_token_index: torch.Tensor
    num_real_tokens: int


class FakeDispatcher:
    """In-order packer with the BinDispatcher interface: each `next_bin` packs waiting sequences,
    in submission order, into one bin of at most `token_budget` aligned tokens."""

    def __init__(self, token_budget: int = 64, alignment: int = 8, max_seqs_per_bin: int = 1024) -> None:
        self.token_budget, self.alignment, self.max_seqs_per_bin = token_budget, alignment, max_seqs_per_bin
        self._waiting: list[tuple[int, list[int], int]] = []
        self._cv = threading.Condition()
        self._closed = False
        self.bins_emitted: list[list[int]] = []

    def start(self) -> None: ...

    def _span(self, n: int) -> int:
        return -(-n // self.alignment) * self.alignment

    def submit(self, seq_id, tokens, max_new_tokens) -> None:
        tokens = [int(t) for t in tokens]
        if self._span(len(tokens)) > self.token_budget:
            raise SequenceTooLong(f"{len(tokens)} tokens > budget {self.token_budget}")
        with self._cv:
            if self._closed:
                raise DispatcherClosed("closed")
            self._waiting.append((seq_id, tokens, max_new_tokens))
            self._cv.notify_all()

    def next_bin(self, timeout):
        with self._cv:
            self._cv.wait_for(lambda: self._waiting or self._closed, timeout=timeout)
            if not self._waiting:
                if self._closed:
                    raise DispatcherClosed("closed and drained")
                return None
            taken, used = [], 0
            while self._waiting and len(taken) < self.max_seqs_per_bin and \
                    used + self._span(len(self._waiting[0][1])) <= self.token_budget:
                item = self._waiting.pop(0)
                taken.append(item)
                used += self._span(len(item[1]))
        return self._pack(taken)

    def _pack(self, taken) -> FakeBin:
        ids, pos, cu, last = [], [], [0], []
        for _, toks, _ in taken:
            span = self._span(len(toks))
            ids += toks + [0] * (span - len(toks))
            pos += list(range(span))
            last.append(cu[-1] + len(toks) - 1)
            cu.append(cu[-1] + span)
        self.bins_emitted.append([s for s, _, _ in taken])
        i32 = lambda xs: torch.tensor(xs, dtype=torch.int32)  # noqa: E731
        return FakeBin(0, i32(ids), i32(pos), i32(cu), torch.tensor([s for s, _, _ in taken]),
                       i32([len(t) for _, t, _ in taken]), i32(last), sum(len(t) for _, t, _ in taken))

    def to_device(self, bin, device):
        return bin

    def release(self, slot: int) -> None: ...

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()


@pytest.fixture(scope="session")
def tiny_cfg() -> ModelConfig:
    return ModelConfig.tiny(vocab_size=256, max_position_embeddings=512)


@pytest.fixture(scope="session")
def tiny_model(tiny_cfg) -> LlamaModel:
    torch.manual_seed(0)
    model = LlamaModel(tiny_cfg, SdpaBackend()).eval()
    with torch.no_grad():  # sharper logits than the default init: fewer near-ties in argmax
        model.lm_head.weight.mul_(4.0)
    return model
