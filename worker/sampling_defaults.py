"""How summaries are decoded unless told otherwise (what `telesum bench quality` measured).

The answer is one sentence on one line; what a small model writes on the next line is commentary
("The above message is a summary ...") or a stray log line. Generation stops there; the text
before is kept.
"""

from worker.engine.sequence import SamplingParams

STOP_STRINGS = ("\n",)
# Greedy decoding of the 4-bit 135M model sometimes loops ("2000000...", "-DU-0114-DU-0114...");
# a penalty on tokens the summary already holds breaks the loop (the prompt's tokens are not penalised).
REPETITION_PENALTY = 1.1


def default_sampling(max_new_tokens: int, temperature: float = 0.0, top_p: float = 1.0) -> SamplingParams:
    """How summaries are generated unless told otherwise: these stop strings and repetition penalty,
    greedy by default."""
    return SamplingParams(max_new_tokens, temperature, top_p, stop=STOP_STRINGS,
                          repetition_penalty=REPETITION_PENALTY)
