"""A small byte-level BPE tokenizer for tests that need real text round trips (chat
templates, decoding, GGUF token tables) without a downloaded model."""

from __future__ import annotations


def tiny_bpe_tokenizer(texts: list[str], add_bos_token: bool = False):
    """specsim's `Tokenizer` over a byte-level BPE of 300 tokens trained on ``texts``
    (five times over), with ``<s>`` = 0 the beginning and ``</s>`` = 1 the end of a
    sequence."""
    from tokenizers import Tokenizer as Backend
    from tokenizers import decoders, models, pre_tokenizers, trainers

    from specsim.models.tokenizer import Tokenizer

    backend = Backend(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(list(texts) * 5, trainer)
    return Tokenizer(backend, bos_token_id=0, eos_token_id=1, add_bos_token=add_bos_token)
