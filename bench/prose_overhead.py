"""What finishing a record costs the serving process: its summary's text and the check against its facts
written on the thread that collects it, against the preprocessing pool writing them.

    python bench/prose_overhead.py --out DIR --tokenizer TOKENIZER_DIR [--workers 2] [--records 4000]
                                   [--generated-tokens 64]

`telesum produce`'s `short` records with their facts, each with a finished sequence of 64 generated
tokens (`--generated-tokens`), put on a ResultCollector's queue at once (as a decode step finishing hundreds of sequences
does) and polled until every Summary is out, side by side in one process: the prose written here,
then by the pool (`Preprocessor.summary_prose`). Two kinds of generated tokens: random ids (what the
GPU benchmarks' random weights write) and a sentence about the record (a model's summary). The
process's own CPU time (getrusage, the pool's processes excluded) and the polling thread's per record:
the Python that holds the GIL the GPU loop launches with. Writes DIR/prose_overhead.json and .png
(DIR/prose_overhead_<N>.json and .png for N generated tokens other than 64).
"""

from __future__ import annotations

import argparse
import json
import queue
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from preprocess_overhead import cpu_s, paired_bars  # noqa: E402  (the serving process's CPU, the chart)


def finished_sequences(tokenizer, records, facts, kind: str, stop: tuple[str, ...], tokens: int) -> list:
    from worker.engine.sequence import SamplingParams, Sequence, SequenceStatus

    rng = random.Random(7)
    params = SamplingParams(tokens, stop=stop)
    seqs = []
    for i, (record, f) in enumerate(zip(records, facts)):
        if kind == "random ids":
            ids = [rng.randrange(tokenizer.vocab_size) for _ in range(tokens)]
        else:
            text = (f" reported {f.problem or 'a fault'} at {f.first_seen or 'an unknown time'}; severity "
                    f"{f.severity or 'unknown'}. Traffic on {f.entity or 'the element'} was moved to its neighbours "
                    "while the link recovered, and no further alarms followed.")
            ids = tokenizer(text, add_special_tokens=False)["input_ids"][:tokens]
        seqs.append(Sequence(i, [1], params, status=SequenceStatus.FINISHED, output=ids, finish_reason="length"))
    return seqs


def measure(collector_for, records, facts, seqs) -> dict:
    from worker.summarizer.summary_assembly import RecordRequest

    finished: queue.SimpleQueue = queue.SimpleQueue()
    collector = collector_for(finished)
    for record, f, seq in zip(records, facts, seqs):
        req = RecordRequest(record.id, record, f, time.perf_counter())
        collector.track(req, -1, lambda seq=seq: seq)
    c0, m0, t0 = cpu_s(), time.thread_time(), time.perf_counter()
    for seq in seqs:
        finished.put(seq)
    got = 0
    while got < len(seqs):
        got += len(collector.poll(60.0))
    c1, m1, t1 = cpu_s(), time.thread_time(), time.perf_counter()
    n = len(seqs)
    return {"process_cpu_ms_per_record": 1e3 * (c1 - c0) / n, "polling_thread_cpu_ms_per_record": 1e3 * (m1 - m0) / n,
            "wall_ms_per_record": 1e3 * (t1 - t0) / n}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tokenizer", type=Path, required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--records", type=int, default=4000)
    ap.add_argument("--generated-tokens", type=int, default=64)
    args = ap.parse_args()

    from worker.facts import extract_facts
    from worker.model.tokenizer import load_tokenizer
    from worker.prompts.sampling import STOP_STRINGS
    from worker.samples import generate
    from worker.summarizer.preprocess import Preprocessor
    from worker.summarizer.result_collector import ResultCollector

    tokenizer = load_tokenizer(str(args.tokenizer))
    records = [r for r, _ in generate(args.records, "short", seed=11)]
    facts = [extract_facts(r) for r in records]

    def decode(ids):
        return tokenizer.decode(ids, skip_special_tokens=True)

    pool = Preprocessor(tokenizer, workers=args.workers)
    res = {"workers": args.workers, "records": args.records, "generated_tokens": args.generated_tokens,
           "command": "python bench/prose_overhead.py " + " ".join(sys.argv[1:]),
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "runs": {}}
    try:
        for f in pool.started:
            f.result()
        pool.submit(records[0]).result()  # the first submit after start-up sees the pool up
        where = {"written here": None, f"by the pool ({args.workers} processes)": pool.summary_prose}
        for kind in ("random ids", "a sentence about the record"):
            seqs = finished_sequences(tokenizer, records, facts, kind, STOP_STRINGS, args.generated_tokens)
            for turn in range(2):  # alternated: the second turn's figures with everything warm
                for name, prose in where.items():
                    run = measure(lambda q, prose=prose: ResultCollector(
                        q, model="m", decode=decode, level_done=lambda req: None, prose=prose), records, facts, seqs)
                    res["runs"].setdefault(kind, {})[name] = run
                    print(kind, name, turn, json.dumps(run), flush=True)
    finally:
        pool.close()
    args.out.mkdir(parents=True, exist_ok=True)
    name = "prose_overhead" if args.generated_tokens == 64 else f"prose_overhead_{args.generated_tokens}"
    (args.out / f"{name}.json").write_text(json.dumps(res, indent=1))
    chart(res, args.out / f"{name}.png")


def chart(res: dict, path: Path) -> None:
    kinds = list(res["runs"])
    names = list(res["runs"][kinds[0]])
    paired_bars([f"{k}, {res['generated_tokens']} tokens" for k in kinds],
                {name: [res["runs"][k][name]["process_cpu_ms_per_record"] for k in kinds] for name in names},
                f"A finished record's summary text and facts check ({res['records']} records at once, {res['date']})",
                path, figsize=(7.5, 3.8))


if __name__ == "__main__":
    main()
