"""Drafters: what proposes a draft tree for the verifier. One verifier serves them all.

- `StreamDrafter` (base.py): Speculative Streaming — the streams of the last accepted node;
- `MedusaDrafter` (medusa.py): Medusa-style heads on the accepted node's final hidden state;
- `StreamLookupDrafter` (prompt_lookup.py): the streams' tree with prompt lookup's copy grafted on;
- `PromptLookupDrafter` (prompt_lookup.py): n-gram copy from the context;
- `RootOnly` (base.py): no draft — plain decoding.
Each returns a `Tree` rooted at the token the main stream already chose.
"""

from specstream_core.decoding.drafters.base import Drafter, RootOnly, RowOutput, StreamDrafter, TopkDrafter
from specstream_core.decoding.drafters.prompt_lookup import PromptLookupDrafter, StreamLookupDrafter

__all__ = ["Drafter", "PromptLookupDrafter", "RootOnly", "RowOutput", "StreamDrafter", "StreamLookupDrafter",
           "TopkDrafter"]
