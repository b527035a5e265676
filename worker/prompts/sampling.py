"""How summaries are decoded unless told otherwise (what `telesum bench quality` measured): the one
owner of the sampling policy, beside the prompts whose answer shape the stop string depends on.

The answer is one sentence on one line; what a small model writes on the next line is commentary
("The above message is a summary ...") or a stray log line. Generation stops there; the text
before is kept. Temperature, top-p and the summary length are the operator's (`[engine]`
settings, greedy by default); the engine's `SamplingParams` is the mechanism, neutral by default.
"""

from __future__ import annotations

from worker.engine.sequence import SamplingParams
from worker.settings.sections import EngineSettings

STOP_STRINGS = ("\n",)
# Greedy decoding of the 4-bit 135M model sometimes loops ("2000000...", "-DU-0114-DU-0114...");
# a penalty on tokens the summary already holds breaks the loop (the prompt's tokens are not penalised).
REPETITION_PENALTY = 1.1

_OPERATOR_DEFAULTS = EngineSettings()


def default_sampling(max_new_tokens: int, temperature: float = _OPERATOR_DEFAULTS.temperature,
                     top_p: float = _OPERATOR_DEFAULTS.top_p) -> SamplingParams:
    """The production sampling: the operator's temperature and top-p (the settings' defaults when not
    given) with the prompts' stop string and the repetition penalty."""
    return SamplingParams(max_new_tokens, temperature, top_p, stop=STOP_STRINGS,
                          repetition_penalty=REPETITION_PENALTY)
