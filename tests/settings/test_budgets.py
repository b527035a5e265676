"""Budgets in force: the operator's value, else the probe's, else the device default."""

from __future__ import annotations

from worker import _native
from worker.dispatch import BinDispatcher
from worker.probe import ProbeResult
from worker.settings.budgets import (ALIGNMENT, CPU_MAX_SEQS_PER_BIN, CPU_TOKEN_BUDGET, CPU_WORK_CAP_S,
                                     GPU_MAX_SEQS_PER_BIN, GPU_TOKEN_BUDGET, GPU_WORK_CAP_TOKENS, LATENCY_CAP_S,
                                     MIN_WORK_CAP_TOKENS, QUEUE_CAPACITY_TOKENS, cpu_work_cap, resolve_budgets)
from worker.settings.load import from_values, load_settings


def _probed(max_decode_seqs: int = 700) -> ProbeResult:
    return ProbeResult(token_budget=40000, kv_rows=300000, max_decode_seqs=max_decode_seqs, peak_bytes=100 * 2**30,
                       seconds=20.0, warmup_seconds=3.0, source="probe", bin_limit=0, free_bytes=120 * 2**30,
                       decode_graph_bytes=2**30, prefill_graph_bytes=0,
                       headroom_bytes=4 * 2**30, seq_tokens=1024, device_name="NVIDIA H200", total_bytes=140 * 2**30)


def test_budgets_gpu_default_is_the_offline_configuration():
    b = resolve_budgets(load_settings(None, {}), "cuda")
    assert (b.token_budget, b.max_seqs_per_bin, b.kv_rows) == (GPU_TOKEN_BUDGET, GPU_MAX_SEQS_PER_BIN, None)
    assert (GPU_TOKEN_BUDGET, GPU_MAX_SEQS_PER_BIN) == (65536, 1024)
    assert b.sources["token_budget"] == "default for cuda"


def test_budgets_cpu_default():
    b = resolve_budgets(load_settings(None, {}), "cpu")
    assert (b.token_budget, b.max_seqs_per_bin) == (CPU_TOKEN_BUDGET, CPU_MAX_SEQS_PER_BIN)


def test_budgets_probe_fills_only_what_the_operator_left_unset():
    b = resolve_budgets(load_settings(None, {"TELESUM_TOKEN_BUDGET": "8192"}), "cuda", _probed())
    assert (b.token_budget, b.max_seqs_per_bin, b.kv_rows, b.max_decode_seqs) == (8192, 700, 300000, 700)
    assert b.sources == {"token_budget": "env TELESUM_TOKEN_BUDGET", "max_seqs_per_bin": "probe",
                         "kv_rows": "probe"}
    assert "token_budget=8192 (env TELESUM_TOKEN_BUDGET)" in b.describe()


def test_budgets_probe_sequences_in_flight_bound_each_bin_up_to_the_gpu_default():
    many = resolve_budgets(load_settings(None, {}), "cuda", _probed(max_decode_seqs=5000))
    assert (many.max_seqs_per_bin, many.max_decode_seqs) == (GPU_MAX_SEQS_PER_BIN, 5000)
    set_by_operator = resolve_budgets(load_settings(None, {"TELESUM_MAX_SEQS_PER_BIN": "64"}), "cuda", _probed(5000))
    assert (set_by_operator.max_seqs_per_bin, set_by_operator.sources["max_seqs_per_bin"]) == (
        64, "env TELESUM_MAX_SEQS_PER_BIN")


def test_budgets_without_a_probe_have_no_decode_bound():
    assert resolve_budgets(load_settings(None, {}), "cuda").max_decode_seqs is None


def test_budgets_same_for_both_commands_settings():
    worker = resolve_budgets(from_values({"kafka.input_topic": "t"}), "cuda")
    offline = resolve_budgets(from_values({}), "cuda")
    assert (worker.token_budget, worker.max_seqs_per_bin) == (offline.token_budget, offline.max_seqs_per_bin)


def test_packing_defaults_agree_between_budgets_py_and_dispatcher_h():
    assert _native.dispatcher_defaults() == {
        "token_budget": GPU_TOKEN_BUDGET, "alignment": ALIGNMENT, "max_seqs_per_bin": GPU_MAX_SEQS_PER_BIN,
        "queue_capacity_tokens": QUEUE_CAPACITY_TOKENS, "latency_cap_s": LATENCY_CAP_S}


def test_python_dispatcher_defaults_are_the_budgets():
    d = BinDispatcher(pin_memory=False)
    try:
        native = d._native
        assert (native.token_budget, native.alignment, native.max_seqs_per_bin) == (
            GPU_TOKEN_BUDGET, ALIGNMENT, GPU_MAX_SEQS_PER_BIN)
    finally:
        d.close()


def test_work_cap_unset_is_the_gpu_cap_on_cuda_and_measured_on_cpu():
    gpu = resolve_budgets(load_settings(None, {}), "cuda").work_cap
    assert (gpu.tokens, gpu.source) == (GPU_WORK_CAP_TOKENS, "default for cuda") and gpu.tokens == 131072
    assert resolve_budgets(load_settings(None, {}), "cpu").work_cap is None  # the Summarizer measures it


def test_work_cap_set_by_the_operator_wins_on_every_device():
    for device in ("cpu", "cuda"):
        cap = resolve_budgets(load_settings(None, {"TELESUM_MAX_RECORD_TOKENS": "4096"}), device).work_cap
        assert (cap.tokens, cap.source) == (4096, "env TELESUM_MAX_RECORD_TOKENS")
        none = resolve_budgets(load_settings(None, {"TELESUM_MAX_RECORD_TOKENS": "0"}), device).work_cap
        assert none.tokens is None and none.describe().startswith("none body tokens")


def test_cpu_work_cap_is_ten_seconds_of_measured_prefill_within_bounds():
    cap = cpu_work_cap(640.0)  # the embedded model on 2 shared cores: 6,400 tokens in 10 s
    assert cap.tokens == 6144 and cap.source == "measured on cpu: 640 prompt tokens/s x 10 s"
    assert cpu_work_cap(30.0).tokens == MIN_WORK_CAP_TOKENS  # a starved CPU: still a useful selection
    assert cpu_work_cap(50_000.0).tokens == GPU_WORK_CAP_TOKENS  # a tiny model: never above a GPU's
    assert CPU_WORK_CAP_S == 10.0
