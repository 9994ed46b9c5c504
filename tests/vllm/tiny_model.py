"""Build a tiny Qwen2 checkpoint that real vLLM can serve on CPU in about a minute, without a download.

Runs in the vLLM virtualenv (it has torch, transformers and tokenizers); the ``vllm`` tier calls
``<vllm-venv>/bin/python tests/vllm/tiny_model.py OUT_DIR``. Nothing is fetched: the byte-level
BPE tokenizer is trained here on a few sentences and the weights are random (seeded), saved with
``save_pretrained`` like any Hub checkpoint, so vLLM's real loading code reads it.

Shape choices, each forced by vLLM's CPU backend or by what the tests exercise:
- head dim 32 (hidden 128 / 4 heads): CPU attention needs a head size >= 32;
- ``max_position_embeddings`` 32768: the catalog's ``maxModelLen`` (4096 in dev) must not exceed it,
  or vLLM refuses the flag — and the test must run the catalog's flags unchanged;
- ``<tool_call>`` / ``</tool_call>`` special tokens and a ChatML template that renders ``tools``: the
  ``hermes`` tool-call parser refuses a tokenizer without those tokens, and tool calling is tested;
- ``<|im_end|>`` as EOS and pad so generation stops the way Qwen chat models do.
"""

from __future__ import annotations

import sys
from pathlib import Path

VOCAB_SIZE = 512
HIDDEN, LAYERS, HEADS, KV_HEADS = 128, 2, 4, 2
HEAD_DIM = HIDDEN // HEADS
#: KV-cache bytes per token at 2-byte (bfloat16) precision: K and V, per layer, per KV head.
KV_BYTES_PER_TOKEN = LAYERS * 2 * KV_HEADS * HEAD_DIM * 2
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]

# ChatML with Hermes-style tools, in the spirit of Qwen2.5's template (written for this test).
CHAT_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\nYou may call these tools:\n<tools>\n"
    "{%- for tool in tools %}{{ tool | tojson }}\n{%- endfor %}</tools>\n"
    'Reply with <tool_call>{"name": ..., "arguments": ...}</tool_call>.<|im_end|>\n{%- endif %}'
    "{%- for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{%- if message['content'] is string %}{{ message['content'] }}{%- endif %}"
    "{%- for call in message.get('tool_calls') or [] %}<tool_call>{{ call['function'] | tojson }}</tool_call>"
    "{%- endfor %}<|im_end|>\n{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "A shared inference fleet serves many models behind one gateway.",
    "Tool calls return JSON with a name and arguments.",
    "What is the weather in Paris? It is sunny and warm today.",
    "Embeddings map text to vectors; chat models answer questions.",
    "0123456789 !?,.;:'\"()[]{}<>/\\|@#$%^&*-_=+~`",
]


def build(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(CORPUS * 20, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                        additional_special_tokens=SPECIAL_TOKENS[1:])
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(out)

    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=32768,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        bos_token_id=None, tie_word_embeddings=True, torch_dtype="bfloat16",
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out)
    model.generation_config.save_pretrained(out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: tiny_model.py OUT_DIR")
    build(Path(sys.argv[1]))
