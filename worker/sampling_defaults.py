"""How summaries are decoded unless told otherwise (what `telesum bench quality` measured).

The answer is one sentence on one line; what a small model writes on the next line is commentary
("The above message is a summary ...") or a stray log line. Generation stops there; the text
before is kept.
"""

STOP_STRINGS = ("\n",)
# Greedy decoding of the 4-bit 135M model sometimes loops ("2000000...", "-DU-0114-DU-0114...");
# a penalty on tokens the summary already holds breaks the loop (the prompt's tokens are not penalised).
REPETITION_PENALTY = 1.1
