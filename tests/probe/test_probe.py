"""The probe's search, budget plan and cache, against a simulated device (no GPU needed)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings, strategies as st

from worker.model.config import ModelConfig
from worker.probe import ProbeError, probe_budgets
from worker.probe import cache as probe_cache
from worker.probe.search import (ALIGN, BIN_MARGIN, MAX_BIN_TOKENS, PREFILL_GRAPHS_SHARE, Trial, headroom_for,
                                 largest_passing, run_probe)
from worker.settings.budgets import GPU_MAX_SEQS_PER_BIN

GiB = 1 << 30


@dataclass
class FakeDevice:
    """A device whose memory is a formula: a pass fits when arena + activations (+ the full pass's
    logits) <= free (less the graphs while they are held). Activations are rounded up to 2 MiB
    blocks, so the linear fit is close, not exact. A bin's prefill graphs hold its activations again
    in their own pool."""

    free: int = 80 * GiB
    total_bytes: int = 96 * GiB
    act_per_token: int = 150_000
    kv_bytes_per_row: int = 56_000
    fixed: int = 300 << 20
    tail_per_seq: int = 600_000
    decode_per_seq: int = 2_000_000
    device_name: str = "Fake GPU"
    resident_bytes: int = 15 * GiB
    max_context: int = 32768
    graph_bytes: int = 0  # what the decode graphs hold once captured
    logits_per_seq: int = 200_000  # a prefill graph's logits row per sequence of the bin
    graphs_held: bool = False
    prefill_graphs_held: int = 0  # bytes the prefill graphs hold
    calls: list = field(default_factory=list)

    def need(self, tokens: int, kv_rows: int, seq: int, full: bool) -> int:
        act = math.ceil(tokens * self.act_per_token / (2 << 20)) * (2 << 20) + self.fixed
        if full:
            act += math.ceil(tokens / seq) * self.tail_per_seq
        return (kv_rows + 1) * self.kv_bytes_per_row + act

    def free_bytes(self) -> int:
        return self.free - (self.graph_bytes if self.graphs_held else 0) - self.prefill_graphs_held

    def hold_decode_graphs(self) -> int:
        self.graphs_held = True
        return self.graph_bytes

    def prefill_graph_bytes(self, bin_tokens: int, bin_seqs: int = GPU_MAX_SEQS_PER_BIN) -> int:
        return self.need(bin_tokens, 0, 1, False) - self.kv_bytes_per_row + bin_seqs * self.logits_per_seq

    def hold_prefill_graphs(self, bin_tokens: int, bin_seqs: int) -> int:
        self.calls.append(("hold_prefill_graphs", bin_tokens, bin_seqs))
        self.prefill_graphs_held = self.prefill_graph_bytes(bin_tokens, bin_seqs)
        return self.prefill_graphs_held

    def release_graphs(self) -> None:
        self.graphs_held, self.prefill_graphs_held = False, 0

    def warm_up(self, seq_tokens: int) -> None:
        self.calls.append(("warm_up", seq_tokens))

    def prefill(self, tokens: int, kv_rows: int, seq_tokens: int, *, full: bool) -> Trial:
        self.calls.append(("prefill", tokens, kv_rows, full))
        need = self.need(tokens, kv_rows, seq_tokens, full)
        return Trial(need <= self.free_bytes(), min(need, self.free_bytes()), 0.0)

    def decode(self, num_seqs: int, context: int, kv_rows: int, max_new_tokens: int) -> Trial:
        self.calls.append(("decode", num_seqs))
        need = (kv_rows + 1) * self.kv_bytes_per_row + num_seqs * self.decode_per_seq
        return Trial(need <= self.free_bytes(), min(need, self.free_bytes()), 0.0)

    def true_bin_limit(self, seq: int) -> int:
        """The largest multiple of ALIGN whose truncated pass fits beside its own rows (by bisection)."""
        lo, hi = 0, MAX_BIN_TOKENS // ALIGN + 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.need(mid * ALIGN, mid * ALIGN, seq, False) <= self.free else (lo, mid)
        return lo * ALIGN


# -- largest_passing ---------------------------------------------------------------------------
def test_largest_passing_good_guess_finds_boundary_in_few_calls():
    boundary = 500_000
    found, calls = largest_passing(lambda n: n <= boundary, guess=510_000, floor=32768,
                                   ceiling=MAX_BIN_TOKENS, step=ALIGN)
    assert boundary * 0.99 <= found <= boundary
    assert calls <= 6


@settings(max_examples=200, deadline=None)
@given(boundary=st.integers(1, 1 << 20), guess=st.integers(0, 1 << 21), step=st.sampled_from([1, 16, 256]))
def test_largest_passing_any_guess_brackets_the_boundary(boundary, guess, step):
    ceiling = 1 << 20
    tried = []

    def fits(n):
        tried.append(n)
        return n <= boundary

    found, calls = largest_passing(fits, guess=guess, floor=0, ceiling=ceiling, step=step)
    assert calls == len(tried)
    assert found <= boundary and found % step == 0  # never a size that failed
    assert found == 0 or fits(found)
    gap = boundary // step * step - found
    assert gap <= max(step, 0.011 * found + step)  # within the 1 % tolerance of the largest fitting size
    assert calls <= 2 * math.log2(ceiling / step + 1) + 4


def test_largest_passing_reaches_the_ceiling_when_everything_fits():
    assert largest_passing(lambda n: True, guess=100, floor=0, ceiling=4096, step=256)[0] == 4096


def test_largest_passing_keeps_the_floor_when_nothing_above_it_fits():
    assert largest_passing(lambda n: n <= 1000, guess=5000, floor=1024, ceiling=1 << 16, step=256)[0] == 1024


# -- run_probe ---------------------------------------------------------------------------------
def test_run_probe_bin_within_one_percent_of_the_limit_in_few_trials():
    dev = FakeDevice()
    r = run_probe(dev, max_new_tokens=128, typical_prompt_tokens=1024)
    truth = dev.true_bin_limit(r.seq_tokens)
    assert truth * 0.99 <= r.bin_limit <= truth
    search = [t for t in r.trials if t["why"] == "largest bin"]
    assert len(search) <= 8
    assert dev.calls[0] == ("warm_up", 1024)


def test_run_probe_applies_the_bin_margin_and_fills_the_rest_with_kv_rows():
    dev = FakeDevice()
    r = run_probe(dev, max_new_tokens=128, typical_prompt_tokens=1024)
    assert r.token_budget == max(ALIGN, int(r.bin_limit * (1 - BIN_MARGIN)) // ALIGN * ALIGN)
    assert r.headroom_bytes == headroom_for(dev.total_bytes)
    # the bin and the whole arena run together, with the headroom (less the logits) to spare ...
    need = dev.need(r.token_budget, r.kv_rows, r.seq_tokens, True)
    assert need <= dev.free
    assert dev.free - need <= r.headroom_bytes + dev.kv_bytes_per_row
    # ... and a bin 15 % larger beside that arena does not
    assert dev.need(int(r.token_budget * 1.15), r.kv_rows, r.seq_tokens, True) > dev.free
    assert r.max_decode_seqs == r.kv_rows // (r.seq_tokens + 128)
    assert r.peak_bytes == dev.resident_bytes + need


def test_run_probe_shrinks_the_arena_when_the_full_pass_needs_more():
    dev = FakeDevice(tail_per_seq=10_000_000)  # the logits of a full pass eat past the headroom
    r = run_probe(dev, max_new_tokens=128, typical_prompt_tokens=1024)
    full = [t for t in r.trials if t["why"] == "bin and arena together"]
    assert full[-1]["ok"] and not full[0]["ok"]
    assert dev.need(r.token_budget, r.kv_rows, r.seq_tokens, True) <= dev.free


def test_run_probe_decode_memory_limits_the_sequences():
    dev = FakeDevice(decode_per_seq=200_000_000)  # sampling temporaries past the headroom
    r = run_probe(dev, max_new_tokens=128, typical_prompt_tokens=1024)
    assert r.max_decode_seqs < r.kv_rows // (r.seq_tokens + 128)
    assert dev.decode(r.max_decode_seqs, 0, r.kv_rows, 128).ok
    largest = (dev.free - (r.kv_rows + 1) * dev.kv_bytes_per_row) // dev.decode_per_seq
    assert largest * 0.99 <= r.max_decode_seqs <= largest


@pytest.mark.parametrize("bin_tokens", [None, 65536])
def test_run_probe_budgets_leave_the_headroom_beside_the_decode_graphs(bin_tokens):
    """The worker holds its decode graphs beside every bin and the arena: the budgets leave the
    headroom with them counted, and the graphs are released when the probe ends."""
    dev = FakeDevice(graph_bytes=3 * GiB)
    r = run_probe(dev, max_new_tokens=128, typical_prompt_tokens=1024, bin_tokens=bin_tokens)
    assert not dev.graphs_held and r.decode_graph_bytes == 3 * GiB
    def beside_graphs(budgets, full: bool) -> int:  # the bin's pass, the arena and the graphs
        return dev.need(budgets.token_budget, budgets.kv_rows, budgets.seq_tokens, full) + 3 * GiB

    assert beside_graphs(r, full=True) <= dev.free
    assert beside_graphs(r, full=False) + r.headroom_bytes <= dev.free  # the headroom is left
    dev.graphs_held = True
    assert dev.decode(r.max_decode_seqs, 0, r.kv_rows, 128).ok
    # budgets planned without counting the graphs would eat the headroom with them
    without = run_probe(FakeDevice(), max_new_tokens=128, typical_prompt_tokens=1024, bin_tokens=bin_tokens)
    assert beside_graphs(without, full=False) + r.headroom_bytes > dev.free


@pytest.mark.parametrize("bin_tokens", [None, 65536])
def test_run_probe_with_prefill_graphs_plans_the_arena_beside_them(bin_tokens):
    """With prefill graphs on, the budget bin's graphs hold a second copy of its activations beside
    the eager ones: the arena is planned beside both (and the decode graphs), the budget's graphs
    are captured once the budget is known, and every graph is released when the probe ends."""
    dev = FakeDevice(graph_bytes=3 * GiB)
    r = run_probe(dev, max_new_tokens=128, typical_prompt_tokens=1024, bin_tokens=bin_tokens, prefill_graphs=True)
    held = dev.prefill_graph_bytes(r.token_budget)
    assert r.prefill_graph_bytes == held > GiB
    assert ("hold_prefill_graphs", r.token_budget, GPU_MAX_SEQS_PER_BIN) in dev.calls and not dev.prefill_graphs_held
    assert r.peak_bytes >= dev.resident_bytes + 3 * GiB + held
    with_graphs = dev.need(r.token_budget, r.kv_rows, r.seq_tokens, False) + 3 * GiB + held
    assert with_graphs + r.headroom_bytes <= dev.free  # the headroom is left with both graphs held
    if bin_tokens is None:  # a probed bin keeps half the usual share of the limit: its activations count twice
        assert r.token_budget == int(r.bin_limit * (1 - BIN_MARGIN) * PREFILL_GRAPHS_SHARE) // ALIGN * ALIGN
    # an arena planned without the prefill graphs would eat that headroom once the worker captures them
    without = run_probe(FakeDevice(graph_bytes=3 * GiB), max_new_tokens=128, typical_prompt_tokens=1024,
                        bin_tokens=r.token_budget)
    assert without.prefill_graph_bytes == 0
    assert dev.need(without.token_budget, without.kv_rows, without.seq_tokens, False) + 3 * GiB + held \
        + r.headroom_bytes > dev.free


def test_run_probe_releases_the_decode_graphs_when_nothing_fits():
    dev = FakeDevice(free=100 << 20)
    with pytest.raises(ProbeError):
        run_probe(dev, max_new_tokens=128)
    assert not dev.graphs_held


def test_run_probe_with_a_given_bin_only_plans_the_arena_beside_it():
    dev = FakeDevice()
    r = run_probe(dev, max_new_tokens=64, typical_prompt_tokens=1024, bin_tokens=65536)
    assert r.token_budget == 65536 and r.bin_limit == 0
    assert not [t for t in r.trials if t["why"] in ("bytes per token", "largest bin")]
    assert r.kv_rows > 65536 and dev.need(65536, r.kv_rows, 1024, True) <= dev.free


def test_run_probe_given_bin_that_cannot_fit_raises_probe_error():
    with pytest.raises(ProbeError, match="do not fit"):
        run_probe(FakeDevice(), max_new_tokens=128, bin_tokens=2_000_000)


def test_run_probe_nothing_fits_raises_probe_error():
    with pytest.raises(ProbeError, match="does not fit"):
        run_probe(FakeDevice(free=100 << 20), max_new_tokens=128)


def test_run_probe_sequences_are_capped_at_the_context():
    r = run_probe(FakeDevice(max_context=600), max_new_tokens=100, typical_prompt_tokens=1024)
    assert r.seq_tokens == 500


# -- probe_budgets and its cache --------------------------------------------------------------
@dataclass
class _Loaded:
    config: ModelConfig
    name: str = "tiny-test"
    dtype: torch.dtype = torch.bfloat16
    precision: str = "bfloat16"  # LoadedModel.precision: "fp8" with FP8 projections


def _probe(tmp_path, dev, precision="bfloat16", **kw):
    return probe_budgets(_Loaded(ModelConfig.tiny(), precision=precision), "cpu",
                         max_new_tokens=kw.pop("max_new_tokens", 128), cache_dir=tmp_path, measurer=dev, **kw)


def _num_trials(dev) -> int:
    return sum(1 for c in dev.calls if c[0] != "warm_up")


def test_probe_budgets_second_call_is_a_cache_hit(tmp_path):
    dev = FakeDevice()
    first = _probe(tmp_path, dev)
    n = _num_trials(dev)
    second = _probe(tmp_path, dev)
    assert first.source == "probe" and second.source == "cache"
    assert _num_trials(dev) == n  # nothing measured again
    for name in ("token_budget", "kv_rows", "max_decode_seqs", "peak_bytes", "bin_limit", "free_bytes",
                 "decode_graph_bytes", "prefill_graph_bytes"):
        assert getattr(first, name) == getattr(second, name)
    assert second.cache_path == first.cache_path and Path(second.cache_path).parent == tmp_path


def test_probe_budgets_key_holds_gpu_memory_model_dtype_torch(tmp_path):
    b = _probe(tmp_path, FakeDevice())
    key = json.loads(Path(b.cache_path).read_text())["key"]
    assert key["gpu_name"] == "Fake GPU" and key["total_bytes"] == 96 * GiB
    assert key["model"] == "tiny-test" and key["dtype"] == "bfloat16" and key["torch_version"] == torch.__version__
    assert key["model_shape"] == probe_cache.model_fingerprint(ModelConfig.tiny())
    assert key["model_shape"] != probe_cache.model_fingerprint(ModelConfig.tiny(num_layers=3))


@pytest.mark.parametrize("change", [
    {"max_new_tokens": 64}, {"typical_prompt_tokens": 512}, {"bin_tokens": 65536}])
def test_probe_budgets_other_inputs_miss_the_cache(tmp_path, change):
    dev = FakeDevice()
    _probe(tmp_path, dev)
    assert _probe(tmp_path, dev, **change).source == "probe"


@pytest.mark.parametrize("env", [{"TELESUM_PREFILL_GRAPHS": "1"}, {"TELESUM_DECODE_GRAPHS": "0"}])
def test_probe_budgets_graph_settings_are_probed_apart(tmp_path, monkeypatch, env):
    """Budgets probed beside other graphs than the worker will hold are not reused: the prefill
    graphs' settings are part of the key, and turning them on probes with them held."""
    dev = FakeDevice()
    plain = _probe(tmp_path, dev)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    other = _probe(tmp_path, dev)
    assert other.source == "probe" and other.cache_path != plain.cache_path
    key = json.loads(Path(other.cache_path).read_text())["key"]
    prefill_on = env.get("TELESUM_PREFILL_GRAPHS") == "1"
    assert key["prefill_graphs"] is prefill_on and key["decode_graphs"] is ("TELESUM_DECODE_GRAPHS" not in env)
    assert (other.prefill_graph_bytes > 0) is prefill_on and (other.kv_rows < plain.kv_rows) is prefill_on
    assert _probe(tmp_path, dev).source == "cache"


def test_probe_budgets_allocator_settings_are_probed_apart(tmp_path, monkeypatch):
    """Growable segments fit more KV rows than fixed ones (an H100, bf16 7B: 964,844 against 944,072):
    budgets probed under other allocator settings than the worker's are not reused."""
    dev = FakeDevice()
    monkeypatch.delenv("PYTORCH_ALLOC_CONF", raising=False)
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    growable = _probe(tmp_path, dev)
    assert json.loads(Path(growable.cache_path).read_text())["key"]["allocator"] == "expandable_segments:True"
    monkeypatch.setenv("PYTORCH_ALLOC_CONF", "expandable_segments:False")  # the newer name wins
    fixed = _probe(tmp_path, dev)
    assert fixed.source == "probe" and fixed.cache_path != growable.cache_path
    monkeypatch.delenv("PYTORCH_ALLOC_CONF")
    assert _probe(tmp_path, dev).source == "cache"


def test_probe_budgets_prefill_graphs_hold_the_operators_sequences_per_bin(tmp_path, monkeypatch):
    """A bin of more sequences than the default gives the prefill graphs more logits rows: the probe
    holds graphs of that many sequences, the arena shrinks by them, and the entry is its own; with
    the prefill graphs off the sequences per bin change nothing and the entry is shared."""
    dev = FakeDevice()
    off = _probe(tmp_path, dev)
    assert _probe(tmp_path, dev, bin_seqs=8192).source == "cache"
    monkeypatch.setenv("TELESUM_PREFILL_GRAPHS", "1")
    default = _probe(tmp_path, dev)
    many = _probe(tmp_path, dev, bin_seqs=8192)
    assert many.source == "probe" and many.cache_path not in (default.cache_path, off.cache_path)
    assert ("hold_prefill_graphs", many.token_budget, 8192) in dev.calls
    extra = (8192 - GPU_MAX_SEQS_PER_BIN) * dev.logits_per_seq
    assert many.prefill_graph_bytes - default.prefill_graph_bytes == extra
    assert (default.kv_rows - many.kv_rows) * dev.kv_bytes_per_row >= extra * 0.9
    assert json.loads(Path(many.cache_path).read_text())["key"]["prefill_graph_seqs"] == 8192


def test_probe_budgets_fp8_weights_are_probed_apart_from_bf16(tmp_path):
    dev = FakeDevice()
    bf16 = _probe(tmp_path, dev)
    fp8 = _probe(tmp_path, dev, precision="fp8")  # smaller weights, other memory: its own entry
    assert fp8.source == "probe" and fp8.cache_path != bf16.cache_path
    assert json.loads(Path(fp8.cache_path).read_text())["key"]["dtype"] == "fp8"
    assert _probe(tmp_path, dev, precision="fp8").source == "cache"


def test_probe_budgets_other_gpu_misses_the_cache(tmp_path):
    _probe(tmp_path, FakeDevice())
    assert _probe(tmp_path, FakeDevice(device_name="Other GPU")).source == "probe"
    assert _probe(tmp_path, FakeDevice(total_bytes=80 * GiB)).source == "probe"


@pytest.mark.parametrize("damage", [
    lambda text: text[: len(text) // 2],                       # torn write
    lambda text: "\x00garbage",
    lambda text: json.dumps([1, 2, 3]),
    lambda text: text.replace('"kv_rows": ', '"kv_rows": -'),  # negative
    lambda text: text.replace('"max_decode_seqs": ', '"max_decode_seqs": "'),  # wrong type (string)
    # an older probe's entry (version 2 planned without the decode graphs' memory)
    lambda text: text.replace(f'"version": {probe_cache.CACHE_VERSION}', '"version": 2'),
    lambda text: text.replace('"free_at_start_bytes": ', '"free_at_start_bytes": -'),
])
def test_probe_budgets_corrupt_entry_is_probed_again_and_rewritten(tmp_path, damage, caplog):
    dev = FakeDevice()
    first = _probe(tmp_path, dev)
    path = Path(first.cache_path)
    text = path.read_text()
    damaged = damage(text)
    assert damaged != text
    path.write_text(damaged)
    again = _probe(tmp_path, dev)
    assert again.source == "probe"
    assert "probing again" in caplog.text
    assert json.loads(path.read_text())["budgets"]["kv_rows"] == first.kv_rows  # a valid entry again
    assert _probe(tmp_path, dev).source == "cache"


@pytest.mark.parametrize("old_version", [False, True])
def test_probe_budgets_entry_of_the_old_field_names_is_a_miss(tmp_path, caplog, old_version):
    # Before the probe spoke the settings' names its entries held bin_tokens and max_seqs (version 1).
    dev = FakeDevice()
    first = _probe(tmp_path, dev)
    path = Path(first.cache_path)
    entry = json.loads(path.read_text())
    budgets = entry["budgets"]
    budgets["bin_tokens"], budgets["max_seqs"] = budgets.pop("token_budget"), budgets.pop("max_decode_seqs")
    if old_version:
        entry["key"]["version"] = 1
    path.write_text(json.dumps(entry))
    again = _probe(tmp_path, dev)
    assert again.source == "probe" and again.max_decode_seqs == first.max_decode_seqs
    assert "probing again" in caplog.text
    assert "max_seqs" not in json.loads(path.read_text())["budgets"]  # rewritten in the current format
    assert _probe(tmp_path, dev).source == "cache"


def test_probe_budgets_free_memory_changed_is_stale(tmp_path, caplog):
    dev = FakeDevice()
    _probe(tmp_path, dev)
    dev.free -= 4 * GiB  # another process took memory since
    again = _probe(tmp_path, dev)
    assert again.source == "probe" and "free" in caplog.text
    dev.free -= GiB // 2  # within the tolerance: the new entry holds
    assert _probe(tmp_path, dev).source == "cache"


def test_probe_budgets_refresh_probes_again(tmp_path):
    dev = FakeDevice()
    _probe(tmp_path, dev)
    assert _probe(tmp_path, dev, refresh=True).source == "probe"


def test_probe_budgets_unwritable_cache_still_returns_budgets(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    b = probe_budgets(_Loaded(ModelConfig.tiny()), "cpu", max_new_tokens=128, cache_dir=blocker,
                      measurer=FakeDevice())
    assert b.source == "probe" and b.token_budget > 0


def test_probe_budgets_on_cpu_without_a_measurer_is_refused():
    with pytest.raises(ValueError, match="not a CUDA device"):
        probe_budgets(_Loaded(ModelConfig.tiny()), "cpu", max_new_tokens=128)


def test_default_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("TELESUM_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert probe_cache.default_cache_dir() == tmp_path / "telesum" / "probe"
    monkeypatch.setenv("TELESUM_CACHE_DIR", str(tmp_path / "c"))
    assert probe_cache.default_cache_dir() == tmp_path / "c" / "probe"
    monkeypatch.delenv("TELESUM_CACHE_DIR")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert probe_cache.default_cache_dir() == tmp_path / "home" / ".cache" / "telesum" / "probe"
