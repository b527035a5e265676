"""Engine exceptions, one per line."""


class EngineClosed(RuntimeError): """The engine stopped before this request finished (close without drain)."""
class ArenaTooSmall(RuntimeError): """A bin or a long sequence needs more KV rows than the whole arena holds."""
class ContextTooLong(ValueError):
    """A prompt plus its new tokens exceeds the model's context length."""
    reason = "too_long"  # its dead letter's reason code


class OutOfMemory(RuntimeError):
    """The GPU ran out of memory for this sequence even prefilled alone in the smallest chunks."""
    reason = "out_of_memory"
