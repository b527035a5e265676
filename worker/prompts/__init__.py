"""Every prompt the worker sends to the model: text utilities (`text`), worked examples
(`examples`), the message templates (`templates`) and the answer's opening (`opening`). Decoding
defaults live in `worker.prompts.sampling`."""

from worker.prompts.examples import EXAMPLE_PROBLEM_MARKS, EXAMPLE_VALUES, EXAMPLES, copied_example_value
from worker.prompts.opening import answer_opening, opening_message, with_opening
from worker.prompts.templates import (
    CHUNK_SYSTEM_PROMPT,
    MAX_PROMPT_DETAILS,
    STRUCTURED_BODY_TOKENS,
    STRUCTURED_KINDS,
    SYSTEM_PROMPT,
    build_chunk_messages,
    build_merge_messages,
    build_messages,
    render_facts,
    render_key_facts,
)
from worker.prompts.text import (
    COMPRESSED_KINDS,
    TokenCounter,
    approx_tokens,
    compress_repeats,
    render_body,
    split_into_chunks,
    trim_to_tokens,
    withhold_instructions,
)

__all__ = [
    "CHUNK_SYSTEM_PROMPT", "COMPRESSED_KINDS", "EXAMPLES", "EXAMPLE_PROBLEM_MARKS", "EXAMPLE_VALUES",
    "answer_opening", "copied_example_value", "opening_message", "with_opening",
    "MAX_PROMPT_DETAILS", "STRUCTURED_BODY_TOKENS", "STRUCTURED_KINDS", "SYSTEM_PROMPT", "TokenCounter",
    "approx_tokens", "build_chunk_messages", "build_merge_messages", "build_messages", "compress_repeats",
    "render_body", "render_facts", "render_key_facts", "split_into_chunks", "trim_to_tokens", "withhold_instructions",
]
