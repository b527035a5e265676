"""The input layer: what arrives on Kafka -> records. One module per format behind `base.Decoder`;
`detect` chooses per message for `auto`; `windows` groups log lines per host into windows."""

from worker.inputs.base import FORMAT_ATTRIBUTE, Decoder, Item, Message
from worker.inputs.detect import decoder_for

__all__ = ["FORMAT_ATTRIBUTE", "Decoder", "Item", "Message", "decoder_for"]
