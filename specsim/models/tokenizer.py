"""A small tokenizer wrapper over the Hugging Face `tokenizers` library.

    tok = Tokenizer.from_file("folder/tokenizer.json")     # a Hugging Face folder
    tok = Tokenizer.from_gguf_fields(fields)                # GGUF metadata (byte-level BPE)
    ids = tok.encode("Hello")                               # list[int]
    text = tok.decode(ids)                                  # str, special tokens dropped
    prompt = tok.apply_chat_template([{"role": "user", "content": "Hi"}])

Chat formatting uses the model's own Jinja template when the checkpoint carries one
(``tokenizer.chat_template`` in GGUF metadata, ``chat_template`` in
``tokenizer_config.json``) and falls back to plain ChatML otherwise::

    <|im_start|>{role}\\n{content}<|im_end|>\\n ... <|im_start|>assistant\\n

GGUF byte-level BPE (``tokenizer.ggml.model == "gpt2"``) is rebuilt as a `tokenizers`
BPE model with a ByteLevel pre-tokenizer and decoder. The pre-tokenizer named by
``tokenizer.ggml.pre`` decides how digits are split: ``smollm`` (and the other
StarCoder-style vocabularies listed in `_DIGIT_SPLIT_PRE`) isolates every digit before
the GPT-2 regex, as SmolLM2's own tokenizer.json and llama.cpp do. Tokens of type
CONTROL (3) become special added tokens, USER_DEFINED (4) plain added tokens.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Sequence

# llama.cpp pre-tokenizer names whose split is "\p{N}" followed by the GPT-2 regex.
_DIGIT_SPLIT_PRE = ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone",
                    "minerva")
_GPT2_PRE = ("default", "gpt2", "gpt-2", "mpt", "olmo", "jais", "")
_CONTROL, _USER_DEFINED = 3, 4


def _chatml(messages: Sequence[dict], add_generation_prompt: bool) -> str:
    parts = [f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages]
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
    return "".join(parts)


class Tokenizer:
    """Text <-> token ids. Wraps a `tokenizers.Tokenizer`; immutable in use."""

    def __init__(self, backend, *, bos_token_id: int | None = None,
                 eos_token_id: int | None = None, chat_template: str | None = None,
                 add_bos_token: bool = False) -> None:
        self.backend = backend
        self.bos_token_id = bos_token_id
        self.eos_token_id = eos_token_id
        self.chat_template = chat_template
        self.add_bos_token = add_bos_token

    # ---- construction -------------------------------------------------------------
    @classmethod
    def from_file(cls, path: str | Path, config: dict | None = None) -> "Tokenizer":
        """From a ``tokenizer.json``; ``config`` is the folder's tokenizer_config.json
        (bos/eos tokens, chat template), read from beside the file when not given."""
        from tokenizers import Tokenizer as Backend

        path = Path(path)
        try:
            backend = Backend.from_file(str(path))
        except Exception as exc:  # tokenizers raises a bare Exception
            raise ValueError(f"{path}: not a readable tokenizer.json ({exc})") from None
        if config is None:
            cfg_path = path.parent / "tokenizer_config.json"
            config = json.loads(cfg_path.read_text()) if cfg_path.is_file() else {}

        def token_id(key):
            tok = config.get(key)
            if isinstance(tok, dict):
                tok = tok.get("content")
            return backend.token_to_id(tok) if isinstance(tok, str) else None

        template = config.get("chat_template")
        return cls(backend, bos_token_id=token_id("bos_token"),
                   eos_token_id=token_id("eos_token"),
                   chat_template=template if isinstance(template, str) else None,
                   add_bos_token=bool(config.get("add_bos_token", False)))

    @classmethod
    def from_gguf_fields(cls, meta: dict, source: str = "gguf") -> "Tokenizer":
        """From GGUF metadata as a plain dict (``tokenizer.ggml.*`` keys)."""
        from tokenizers import AddedToken, Regex, decoders, pre_tokenizers, processors
        from tokenizers import Tokenizer as Backend
        from tokenizers.models import BPE

        kind = meta.get("tokenizer.ggml.model")
        if kind != "gpt2":
            raise ValueError(f"{source}: tokenizer.ggml.model {kind!r} is not supported; only "
                             f"byte-level BPE ('gpt2') is")
        tokens = list(meta["tokenizer.ggml.tokens"])
        merges = meta.get("tokenizer.ggml.merges")
        if merges is None:
            raise ValueError(f"{source}: byte-level BPE without tokenizer.ggml.merges")
        types = list(meta.get("tokenizer.ggml.token_type") or [1] * len(tokens))
        pre = meta.get("tokenizer.ggml.pre", "default")
        vocab = {tok: i for i, tok in enumerate(tokens)}
        pairs = [tuple(m.split(" ", 1)) for m in merges]
        backend = Backend(BPE(vocab=vocab, merges=pairs, dropout=None,
                              continuing_subword_prefix="", end_of_word_suffix="",
                              fuse_unk=False))
        byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        if pre in _DIGIT_SPLIT_PRE:
            backend.pre_tokenizer = pre_tokenizers.Sequence(
                [pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated"), byte_level])
        elif pre in _GPT2_PRE:
            backend.pre_tokenizer = byte_level
        else:
            raise ValueError(f"{source}: pre-tokenizer {pre!r} is not supported; supported: "
                             f"{sorted(set(_DIGIT_SPLIT_PRE + _GPT2_PRE) - {''})}")
        backend.decoder = decoders.ByteLevel()
        backend.post_processor = processors.ByteLevel(trim_offsets=False)
        special = [AddedToken(t, special=True, normalized=False)
                   for t, ty in zip(tokens, types) if ty == _CONTROL]
        user = [AddedToken(t, special=False, normalized=False)
                for t, ty in zip(tokens, types) if ty == _USER_DEFINED]
        backend.add_special_tokens(special)
        backend.add_tokens(user)
        if backend.get_vocab_size(with_added_tokens=True) != len(tokens):
            raise ValueError(f"{source}: tokenizer vocabulary has duplicate tokens")

        def opt_id(key):
            value = meta.get(f"tokenizer.ggml.{key}")
            return int(value) if value is not None else None

        return cls(backend, bos_token_id=opt_id("bos_token_id"),
                   eos_token_id=opt_id("eos_token_id"),
                   chat_template=meta.get("tokenizer.chat_template"),
                   add_bos_token=bool(meta.get("tokenizer.ggml.add_bos_token", False)))

    def save(self, folder: str | Path) -> None:
        """Write ``tokenizer.json`` and ``tokenizer_config.json`` into ``folder``."""
        folder = Path(folder)
        self.backend.save(str(folder / "tokenizer.json"))
        config = {"add_bos_token": self.add_bos_token}
        for key, tid in (("bos_token", self.bos_token_id), ("eos_token", self.eos_token_id)):
            if tid is not None:
                config[key] = self.backend.id_to_token(tid)
        if self.chat_template:
            config["chat_template"] = self.chat_template
        (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=1))

    # ---- use ------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of ``text``. Special tokens written in the text (``<|im_start|>``)
        are recognised; ``add_special_tokens`` prepends BOS when the model wants one."""
        if not isinstance(text, str):
            raise ValueError(f"text must be a str, got {type(text).__name__}")
        ids = self.backend.encode(text, add_special_tokens=False).ids
        if add_special_tokens and self.add_bos_token and self.bos_token_id is not None:
            ids = [self.bos_token_id] + ids
        return ids

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        ids = [int(i) for i in ids]
        bad = [i for i in ids if i < 0 or i >= self.vocab_size]
        if bad:
            raise ValueError(f"ids must lie in [0, {self.vocab_size - 1}], got {bad[:5]}")
        return self.backend.decode(ids, skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    def apply_chat_template(self, messages: Sequence[dict],
                            add_generation_prompt: bool = True) -> str:
        """The prompt text for a chat: the checkpoint's Jinja template if it has one
        (rendered with jinja2), else ChatML."""
        for m in messages:
            if not isinstance(m, dict) or "role" not in m or "content" not in m:
                raise ValueError(f"messages must be dicts with 'role' and 'content', got {m!r}")
        if not self.chat_template:
            return _chatml(messages, add_generation_prompt)
        try:
            import jinja2
        except ImportError:
            return _chatml(messages, add_generation_prompt)
        env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
        template = env.from_string(self.chat_template)

        def tok(tid):
            return self.backend.id_to_token(tid) if tid is not None else ""

        return template.render(messages=list(messages),
                               add_generation_prompt=add_generation_prompt,
                               bos_token=tok(self.bos_token_id), eos_token=tok(self.eos_token_id))

    def __repr__(self) -> str:
        return (f"Tokenizer(vocab_size={self.vocab_size}, bos={self.bos_token_id}, "
                f"eos={self.eos_token_id}, chat_template={self.chat_template is not None})")
