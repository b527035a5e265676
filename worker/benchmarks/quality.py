"""`telesum bench quality`: do the summaries name the element, the problem and the severity?

Records with known facts come from `worker.samples` (seeded): `--n` in all, most from the
`short` profile, `--mixed` of them from `mixed` (half of those ~2,000-word records), `--real`
from `real` (host logs in every syslog shape, field-style VES and PM bodies, ugly ones included;
group `set=real`) and `--grounding` from `worker.benchmarks.quality_cases` (sshd windows of failed
logins and authentication failures, closed sessions, operator notes without a known problem;
group `set=grounding`). Each is summarised end to end by the real `Summarizer` and scored against its
ground truth:

- element named: the truth entity (e.g. `gNB-2854-DU`) occurs in the summary as a whole name,
  case-insensitive, with `-`, `_` and spaces between its parts treated alike.
- problem named: every word of `details["problemKeywords"]` occurs in the summary at the start of
  a word (so `fail` matches `failure`), case-insensitive, British and American `-is-`/`-iz-`
  spellings alike.
- severity right: the truth severity's name occurs in the summary and no other name of the scale
  (critical, major, minor, warning, info/informational) does.
- echo: the summary just repeats the input: (a) its normalised text (>= 12 characters) is a
  substring of the normalised record body, or (b) for one line of the body as the model read it,
  at least `ECHO_OVERLAP` of the summary's distinct word tokens occur in that line.
- agrees: the Summary's own `narrative.agrees` (worker.facts.agreement), checked against the
  extracted facts rather than the ground truth: what a consumer sees at run time.
- copied: the summary holds a worked example's element, time or problem words
  (`worker.prompts.copied_example_value`).
- placeholder: the summary quotes a filler text the record holds (`details["placeholders"]` of the
  truth, `|`-separated: `additional text details`); unchecked_kpi: it says "within normal range"
  of a PM report from whose counters no known KPI can be computed (`details["kpiComputed"] == "no"`);
  senders: every sender of `details["senders"]` is named (true when the truth lists none).

`--network N` adds the cases of `quality_cases.generate_network` (group `set=network`: 3GPP
notifications over VES stndDefined, PM reports without a known KPI, windows of several senders).
`--opening-only` scores the grounded opening written from the extracted facts without loading a
model: with the embedded model every summary is its opening, so this is what users read, on a CPU
in seconds.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import time
from collections import defaultdict
from pathlib import Path

import msgspec

from worker.messages import Facts, TelemetryRecord
from worker.prompts import copied_example_value, render_body

log = logging.getLogger(__name__)

ECHO_OVERLAP = 0.8
ECHO_MIN_CHARS = 12  # shorter summaries are scored as empty-ish, not as echoes of a substring
SEVERITY_NAMES = {"critical": ("critical",), "major": ("major",), "minor": ("minor",),
                  "warning": ("warning",), "info": ("info", "informational")}
DEFAULT_OUTPUT = Path("bench/results/quality_records.jsonl")

_TOKEN = re.compile(r"[a-z0-9]+(?:[-.:/][a-z0-9]+)*")


# -- scoring ---------------------------------------------------------------------------------
def normalise(text: str) -> str:
    """Lower case, `-is-` spelling for `-iz-`, whitespace collapsed, edge punctuation dropped."""
    text = re.sub(r"iz(e|ed|es|ing|ation|ations)\b", r"is\1", text.lower())
    return " ".join(text.split()).strip(" .,;:!\"'`*-")


def tokens(text: str) -> set[str]:
    """Distinct lower-case word tokens (a token keeps inner `-.:/`, e.g. `gnb-0042`, `10.0.0.1`)."""
    return set(_TOKEN.findall(normalise(text)))


def entity_named(summary: str, entity: str | None) -> bool:
    """True when `entity` occurs in `summary` as a whole name (case-insensitive; `-`, `_` and
    spaces between its parts alike). Raises ValueError when there is no entity to look for."""
    if not entity or not entity.strip():
        raise ValueError("entity_named needs a non-empty ground-truth entity")
    parts = [re.escape(p) for p in re.split(r"[-_\s]+", entity.strip().lower()) if p]
    pattern = r"(?<![a-z0-9])" + r"[-_\s]*".join(parts) + r"(?![a-z0-9])"
    return re.search(pattern, summary.lower()) is not None


def problem_keywords(facts: Facts) -> list[str]:
    """The ground truth's `problemKeywords`; ValueError when the facts carry none."""
    raw = facts.details.get("problemKeywords", "")
    words = [w.strip() for w in raw.split(",") if w.strip()]
    if not words:
        raise ValueError("ground-truth facts carry no details['problemKeywords']")
    return words


def problem_named(summary: str, keywords: list[str]) -> bool:
    """True when every keyword starts a word of `summary` (`fail` matches `failure`)."""
    text = normalise(summary)
    return all(re.search(r"(?<![a-z0-9])" + re.escape(normalise(k)), text) for k in keywords)


def severities_named(summary: str) -> set[str]:
    """Which scale severities `summary` names (info also as `informational`)."""
    text = normalise(summary)
    return {name for name, words in SEVERITY_NAMES.items()
            if any(re.search(rf"(?<![a-z0-9]){w}(?![a-z0-9])", text) for w in words)}


def severity_right(summary: str, severity: str | None) -> bool:
    """True when `summary` names `severity` and no other severity of the scale."""
    if severity not in SEVERITY_NAMES:
        raise ValueError(f"unknown ground-truth severity {severity!r}; expected one of {', '.join(SEVERITY_NAMES)}")
    return severities_named(summary) == {severity}


def is_echo(summary: str, body_lines: list[str], overlap: float = ECHO_OVERLAP) -> bool:
    """True when the summary just repeats the input (see the module docstring for the rule)."""
    text = normalise(summary)
    if not text:
        return False
    if len(text) >= ECHO_MIN_CHARS and text in normalise("\n".join(body_lines)):
        return True
    mine = tokens(summary)
    if not mine:
        return False
    return any(len(mine & tokens(line)) >= overlap * len(mine) for line in body_lines if line.strip())


def quotes_placeholder(summary: str, truth: Facts) -> bool:
    """True when the summary quotes one of the filler texts the truth lists."""
    fillers = [f for f in truth.details.get("placeholders", "").split("|") if f.strip()]
    text = normalise(summary)
    return any(re.search(r"(?<![a-z0-9])" + re.escape(normalise(f)) + r"(?![a-z0-9])", text) for f in fillers)


def claims_unchecked_kpi(summary: str, truth: Facts) -> bool:
    """True when the summary says KPIs are within normal range while none could be computed."""
    return truth.details.get("kpiComputed") == "no" and "normal range" in normalise(summary)


def senders_named(summary: str, truth: Facts) -> bool:
    """True when every sender the truth lists is named (as `entity_named` reads a name)."""
    return all(entity_named(summary, s) for s in truth.details.get("senders", "").split(", ") if s.strip())


def score(record: TelemetryRecord, truth: Facts, summary: str, agrees: bool = False) -> dict[str, bool]:
    """The checks for one summary against its record's ground truth (`agrees` as the Summary said)."""
    return {
        "placeholder": quotes_placeholder(summary, truth),
        "unchecked_kpi": claims_unchecked_kpi(summary, truth),
        "senders": senders_named(summary, truth),
        "agrees": agrees,
        "entity": entity_named(summary, truth.entity),
        "problem": problem_named(summary, problem_keywords(truth)),
        "severity": severity_right(summary, truth.severity),
        "echo": is_echo(summary, render_body(record).splitlines()),
        "empty": not summary.strip(),
        "copied": copied_example_value(summary) is not None,
    }


def aggregate(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Share of rows passing each check, overall and per group (`kind`, and `length`)."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        groups["all"].append(row)
        groups[f"kind={row['kind']}"].append(row)
        groups[f"length={row['length']}"].append(row)
        groups[f"set={row.get('set', 'generated')}"].append(row)
    out = {}
    for name in sorted(groups, key=lambda g: (g != "all", g)):
        members = groups[name]
        out[name] = {"n": len(members), **{check: sum(r["score"][check] for r in members) / len(members)
                                           for check in ("entity", "problem", "severity", "echo", "empty", "agrees",
                                                         "copied", "placeholder", "unchecked_kpi", "senders")
                                           if check in members[0]["score"]}}
    return out


# -- the run ---------------------------------------------------------------------------------
def corpus(n: int, mixed: int, seed: int, real: int = 0, grounding: int = 0,
           formats: int = 0, network: int = 0) -> list[tuple[TelemetryRecord, Facts, str]]:
    """(record, truth, length group) for `n - mixed - real - formats - grounding` short records, then
    `mixed` from `mixed`, then `real` from `real`, `formats` from `real-formats` (network gear, app logs,
    28.532 PM, VES alarm names), then `grounding` from `quality_cases`."""
    from worker.benchmarks import quality_cases
    from worker.samples import generate

    if min(mixed, real, grounding, formats, network) < 0 or mixed + real + grounding + formats + network > n:
        raise ValueError(f"--mixed ({mixed}), --real ({real}), --formats ({formats}), --grounding ({grounding}) and "
                         f"--network ({network}) must be >= 0 and add up to at most n ({n})")
    out = [(r, t, "short") for r, t in generate(n - mixed - real - formats - grounding - network, "short", seed)]
    for record, truth in generate(mixed, "mixed", seed):
        long = len(render_body(record).split()) > 1000
        out.append((msgspec.structs.replace(record, id=f"mixed-{record.id}"), truth, "long" if long else "short"))
    for record, truth in generate(real, "real", seed) + generate(formats, "real-formats", seed):
        long = len(render_body(record).split()) > 1000
        out.append((record, truth, "long" if long else "short"))
    out += [(record, truth, "short") for record, truth in quality_cases.generate(grounding, seed)]
    out += [(record, truth, "short") for record, truth in quality_cases.generate_network(network, seed)]
    return out


def record_set(record: TelemetryRecord) -> str:
    """The benchmark group a record belongs to: `formats` (network gear, app logs, 28.532 PM, VES
    alarm names), `real` (host logs, field VES/PM), `grounding` (host-log windows and operator notes
    of `quality_cases`) or `generated`."""
    if record.attributes.get("shape") == "real-formats":
        return "formats"
    for prefix in ("real", "grounding", "network"):
        if record.id.startswith(prefix + "-"):
            return prefix
    return "generated"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=int, default=100, help="records in all")
    parser.add_argument("--mixed", type=int, default=None,
                        help="how many of them come from the `mixed` profile (default n // 10)")
    parser.add_argument("--real", type=int, default=None,
                        help="how many of them come from the real-shaped `real` profile (default n // 5)")
    parser.add_argument("--formats", type=int, default=0,
                        help="how many of them come from `real-formats` (network gear, application logs, "
                             "TS 28.532 PM, VES alarm names; default 0)")
    parser.add_argument("--grounding", type=int, default=None,
                        help="how many of them are host-log windows and operator notes (default n // 5)")
    parser.add_argument("--network", type=int, default=0,
                        help="how many of them are 3GPP notifications over VES, PM reports without a known KPI "
                             "and windows of several senders (quality_cases.generate_network; default 0)")
    parser.add_argument("--opening-only", action="store_true",
                        help="score the grounded opening from the extracted facts, without a model (what the "
                             "embedded model's summaries are)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-new-tokens", type=int, default=80)
    parser.add_argument("--model", default=None, help="HF folder or .gguf (default: embedded SmolLM2-135M)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", choices=("auto", "fp8"), default="auto",
                        help="'fp8': the decoder's projections in FP8, as engine.dtype (compare with 'auto')")
    parser.add_argument("--kv-cache", choices=("auto", "fp8"), default="auto",
                        help="'fp8': K/V stored as FP8, as engine.kv_cache (compare with 'auto')")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="per-record JSON Lines")
    parser.add_argument("--chart", type=Path, default=None, help="write a PNG bar chart here")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")


def summarise(records: list[TelemetryRecord], model: str | None, device: str, max_new_tokens: int,
              dtype: str = "auto", kv_cache: str = "auto"):
    """(record, Summary or exception) in order, through the real Summarizer."""
    import torch

    from worker.model import embedded_model_path, load_model, use_fp8_weights
    from worker.model.loader import use_fp8_kv_cache
    from worker.settings.budgets import Budgets, device_defaults
    from worker.settings.sections import EngineSettings
    from worker.summarizer.summarizer import Summarizer

    dev = torch.device(device)
    defaults = device_defaults(dev.type)  # what both commands use on this device
    loaded = load_model(model or embedded_model_path(), device=dev)
    if dtype == "fp8":
        use_fp8_weights(loaded)
    if kv_cache == "fp8":
        use_fp8_kv_cache(loaded)
    summarizer = Summarizer(loaded, EngineSettings(max_new_tokens=max_new_tokens, max_record_tokens=0),
                            Budgets(defaults["token_budget"], defaults["max_seqs_per_bin"], None, {}))
    summarizer.start()
    try:
        return loaded.name + (f" ({loaded.precision})" if loaded.fp8 or loaded.fp8_kv else ""), \
            list(summarizer.results_in_order(records))
    finally:
        summarizer.close(drain=False)


def openings(records: list[TelemetryRecord]):
    """(name, [(record, Summary)]) of the grounded openings alone: the facts, the opening, its check."""
    from worker.facts import extract_facts
    from worker.facts.agreement import check_narrative
    from worker.messages import Summary
    from worker.prompts import answer_opening

    out = []
    for record in records:
        facts = extract_facts(record)
        text = answer_opening(record, facts)
        out.append((record, Summary(id=record.id, summary=text, model="opening-only", prompt_tokens=0,
                                    output_tokens=0, facts=facts, narrative=check_narrative(text, facts, record))))
    return "opening-only (no model)", out


def corpus_sizes(args: argparse.Namespace) -> dict[str, int]:
    """How many records of each set `args` (`telesum bench quality`'s) asks for; those unset follow --n."""
    if args.n < 1:
        raise ValueError(f"--n must be >= 1, got {args.n}")
    return {"mixed": args.n // 10 if args.mixed is None else args.mixed,
            "real": args.n // 5 if args.real is None else args.real, "formats": getattr(args, "formats", 0),
            "grounding": args.n // 5 if args.grounding is None else args.grounding,
            "network": getattr(args, "network", 0)}


def run(args: argparse.Namespace) -> int:
    sizes = corpus_sizes(args)
    items = corpus(args.n, seed=args.seed, **sizes)
    started = time.perf_counter()
    if getattr(args, "opening_only", False):
        model_name, results = openings([r for r, _, _ in items])
    else:
        model_name, results = summarise([r for r, _, _ in items], args.model, args.device, args.max_new_tokens,
                                        getattr(args, "dtype", "auto"), getattr(args, "kv_cache", "auto"))
    elapsed = time.perf_counter() - started
    rows, failures = [], 0
    for (record, truth, length), (_, result) in zip(items, results):
        if isinstance(result, Exception):
            failures += 1
            text, facts, narrative = "", None, None
            log.warning("%s: %s: %s", record.id, type(result).__name__, result)
        else:
            text, facts, narrative = result.summary, result.facts, result.narrative
        rows.append({"id": record.id, "kind": record.kind, "length": length,
                     "set": record_set(record), "summary": text,
                     "score": score(record, truth, text, bool(narrative and narrative.agrees)),
                     "truth": msgspec.to_builtins(truth),
                     "facts": msgspec.to_builtins(facts) if facts is not None else None,
                     "narrative": msgspec.to_builtins(narrative) if narrative is not None else None})
    args.output.parent.mkdir(parents=True, exist_ok=True)
    with args.output.open("w") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    result = {"model": model_name, "n": args.n, **sizes, "seed": args.seed,
              "max_new_tokens": args.max_new_tokens, "failures": failures, "seconds": round(elapsed, 1),
              "echo_rule": f"substring of body or >= {ECHO_OVERLAP} of tokens from one body line",
              "groups": aggregate(rows)}
    if args.chart is not None:
        write_chart(result, args.chart)
    if args.json:
        print(json.dumps(result))
    else:
        print(format_table(result))
        print(f"per-record outputs: {args.output}")
    return 0


def format_table(result: dict) -> str:
    """The result as a fixed-width text table, one row per group."""
    lines = [f"{result['model']}: n={result['n']} (mixed {result['mixed']}, real {result.get('real', 0)}, "
             f"formats {result.get('formats', 0)}, grounding {result.get('grounding', 0)}), "
             f"seed {result['seed']}, max_new_tokens {result['max_new_tokens']}, {result['seconds']} s, "
             f"{result['failures']} failed",
             f"{'group':<16}{'n':>5}{'element':>9}{'problem':>9}{'severity':>10}{'echo':>7}{'empty':>7}{'agrees':>8}"
             f"{'copied':>8}{'filler':>8}{'no-KPI':>8}{'senders':>9}"]
    for name, g in result["groups"].items():
        lines.append(f"{name:<16}{g['n']:>5}{g['entity']:>9.0%}{g['problem']:>9.0%}{g['severity']:>10.0%}"
                     f"{g['echo']:>7.0%}{g['empty']:>7.0%}{g.get('agrees', 0):>8.0%}{g.get('copied', 0):>8.0%}"
                     f"{g.get('placeholder', 0):>8.0%}{g.get('unchecked_kpi', 0):>8.0%}{g.get('senders', 1):>9.0%}")
    return "\n".join(lines)


def write_chart(result: dict, path: Path) -> None:
    """A grouped bar chart: element/problem/severity recall and echo share per group."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(result["groups"])
    checks = (("entity", "element named"), ("problem", "problem named"), ("severity", "severity right"),
              ("echo", "echoes input"))
    fig, ax = plt.subplots(figsize=(1.4 * len(groups) + 2, 4))
    width = 0.8 / len(checks)
    for i, (key, label) in enumerate(checks):
        xs = [g + (i - 1.5) * width for g in range(len(groups))]
        ax.bar(xs, [100 * result["groups"][g][key] for g in groups], width, label=label)
    ax.axhline(90, color="grey", linestyle="--", linewidth=0.8)
    ax.axhline(5, color="grey", linestyle=":", linewidth=0.8)
    ax.set_xticks(range(len(groups)), [f"{g}\n(n={result['groups'][g]['n']})" for g in groups], fontsize=8)
    ax.set_ylabel("% of summaries")
    ax.set_ylim(0, 105)
    ax.set_title(f"Summary quality, {result['model']}, n={result['n']}, seed {result['seed']}")
    ax.legend(fontsize=8, loc="upper right", ncol=2)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
