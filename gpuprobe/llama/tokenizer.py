"""Tokenizers: byte-level BPE built from GGUF metadata, a byte tokenizer for random models,
ChatML chat prompts, and incremental detokenization for streaming."""

from __future__ import annotations

from gpuprobe.llama.gguf_loader import ModelLoadError, VocabSpec

CONTROL_TOKEN_TYPE = 3  # llama.cpp token type for <|im_start|> and friends


def render_chatml(messages: list[dict], add_generation_prompt: bool = True) -> str:
    """ChatML, used when a GGUF carries no chat template: <|im_start|>role\\ncontent<|im_end|>\\n
    per message, then the assistant header."""
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


class BPETokenizer:
    """GPT-2 style byte-level BPE over a GGUF vocabulary (tokenizer.ggml.model == 'gpt2')."""

    def __init__(self, vocab: VocabSpec):
        from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

        if vocab.model != "gpt2":
            raise ModelLoadError(f"tokenizer model {vocab.model!r}: only 'gpt2' BPE is supported")
        bpe = models.BPE(vocab={tok: i for i, tok in enumerate(vocab.tokens)},
                         merges=[tuple(m.split(" ", 1)) for m in vocab.merges],
                         fuse_unk=False, byte_fallback=False)
        self._tok = Tokenizer(bpe)
        steps = [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
        if vocab.pre == "smollm":  # llama.cpp's 'smollm' splits digits one by one first
            steps.insert(0, pre_tokenizers.Digits(individual_digits=True))
        self._tok.pre_tokenizer = pre_tokenizers.Sequence(steps)
        self._tok.decoder = decoders.ByteLevel()
        special = [tok for tok, kind in zip(vocab.tokens, vocab.token_types)
                   if kind == CONTROL_TOKEN_TYPE]
        self._tok.add_special_tokens(
            [AddedToken(t, special=True, normalized=False) for t in special])
        self.vocab_size = len(vocab.tokens)
        # No token stands for more UTF-8 bytes than this (its byte-level string encoded is at
        # least as long), so a text of B bytes has at least B / max_token_bytes tokens.
        self.max_token_bytes = max(len(tok.encode("utf-8")) for tok in vocab.tokens)
        self.bos_token_id = vocab.bos_token_id
        self.eos_token_id = vocab.eos_token_id
        self.chat_template = vocab.chat_template

    def encode(self, text: str) -> list[int]:
        """Text -> token ids; special-token strings such as <|im_start|> map to their ids."""
        # encode_batch releases the GIL while it works (encode does not: 0.7 s for 1 MB), so a
        # server tokenising in a thread keeps its event loop running.
        return self._tok.encode_batch([text], add_special_tokens=False)[0].ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self._tok.decode(ids, skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, messages: list[dict],
                            add_generation_prompt: bool = True) -> list[int]:
        """Render messages ([{'role': ..., 'content': ...}]) with the GGUF's template."""
        if self.chat_template is None:
            return self.encode(render_chatml(messages, add_generation_prompt))
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        # trim_blocks / lstrip_blocks: how Hugging Face renders chat templates.
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        text = env.from_string(self.chat_template).render(
            messages=messages, add_generation_prompt=add_generation_prompt,
            bos_token=self._token(self.bos_token_id), eos_token=self._token(self.eos_token_id))
        return self.encode(text)

    def _token(self, token_id: int | None) -> str:
        return "" if token_id is None else self._tok.id_to_token(token_id)


class ByteTokenizer:
    """UTF-8 bytes as ids 0..255 plus four specials; for random-weight models like 'tiny'."""

    SPECIALS = ("<s>", "</s>", "<|im_start|>", "<|im_end|>")  # ids 256..259

    def __init__(self, vocab_size: int):
        if vocab_size < 256 + len(self.SPECIALS):
            raise ValueError(f"a byte tokenizer needs vocab_size >= 260, got {vocab_size}")
        self.vocab_size = vocab_size
        self.max_token_bytes = 1
        self.bos_token_id, self.eos_token_id = 256, 257
        self._im_start, self._im_end = 258, 259
        self.chat_template = None

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        # Ids past the specials (a random model emits them) carry no text.
        out, run = [], bytearray()
        for i in ids:
            if i < 256:
                run.append(i)
                continue
            out.append(run.decode("utf-8", errors="replace"))
            run = bytearray()
            if not skip_special_tokens and i < 256 + len(self.SPECIALS):
                out.append(self.SPECIALS[i - 256])
        out.append(run.decode("utf-8", errors="replace"))
        return "".join(out)

    def apply_chat_template(self, messages: list[dict],
                            add_generation_prompt: bool = True) -> list[int]:
        ids: list[int] = []
        for m in messages:
            ids += [self._im_start, *self.encode(f"{m['role']}\n{m['content']}"), self._im_end,
                    *self.encode("\n")]
        if add_generation_prompt:
            ids += [self._im_start, *self.encode("assistant\n")]
        return ids


Tokenizer = BPETokenizer | ByteTokenizer


class IncrementalDetokenizer:
    """Turns a stream of token ids into text deltas without splitting UTF-8 characters.

    Keeps a short window of ids (vLLM's prefix/read offsets): text is released only when
    decoding the window no longer ends in a replacement character.
    """

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self._prefix = 0  # window start
        self._read = 0  # ids before this are already emitted as text

    def add(self, token_id: int) -> str:
        """Append one token; return the newly completed text ('' while a character is split)."""
        self.ids.append(token_id)
        done = self.tokenizer.decode(self.ids[self._prefix:self._read])
        full = self.tokenizer.decode(self.ids[self._prefix:])
        if len(full) <= len(done) or full.endswith("\ufffd"):
            return ""
        self._prefix, self._read = self._read, len(self.ids)
        return full[len(done):]


def load_tokenizer(reader=None, vocab_size: int | None = None) -> Tokenizer:
    """BPE from an open GGUFReader, else a byte tokenizer for a random model's vocab_size."""
    if reader is not None:
        from gpuprobe.llama.gguf_loader import read_vocab

        return BPETokenizer(read_vocab(reader))
    return ByteTokenizer(vocab_size)
