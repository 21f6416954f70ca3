"""Train the bundled byte-level BPE tokenizer and save it as a `transformers` tokenizer directory.

    tok = build_tokenizer(texts, vocab_size=4096)
    tok.save_pretrained(out_dir)          # AutoTokenizer.from_pretrained(out_dir) works offline

One special token, ``<|endoftext|>`` (id 0), serves as bos, eos and pad (GPT-2 style). The tokenizer
prepends it to every encoded text (like Llama's BOS), matching training, where documents are joined
by it. Digits are split one per token so arithmetic in the math task is learnable.
"""

from __future__ import annotations

from typing import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from specstream_core.tasks.common import EOS


def build_tokenizer(texts: Iterable[str], vocab_size: int = 4096, min_frequency: int = 2) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[EOS],  # id 0
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    eos_id = tok.token_to_id(EOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{EOS} $A", pair=f"{EOS} $A {EOS} $B", special_tokens=[(EOS, eos_id)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=EOS,
        eos_token=EOS,
        pad_token=EOS,
        unk_token=None,
        model_max_length=1024,
        clean_up_tokenization_spaces=False,
    )
