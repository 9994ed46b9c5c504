"""Make a tiny LoRA adapter over tests/vllm/tiny_model.py's Qwen2, as PEFT saves one, without a download.

Runs in the vLLM virtualenv (torch, safetensors): ``<vllm-venv>/bin/python tests/vllm/tiny_lora.py OUT BASE``.
It writes what vLLM 0.32 reads (vllm/lora/peft_helper.py@v0.32.0 `PEFTHelper.from_local_dir`,
vllm/lora/lora_model.py `from_local_checkpoint`): ``adapter_config.json`` (rank, alpha, the target
modules, the base it claims, bias none) and ``adapter_model.safetensors`` with PEFT's tensor names
(``base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight`` of shape (r, in), ``lora_B`` of
shape (out, r)). PEFT starts B at zero, which would change nothing; here both are random (seeded)
and large, so the adapter's answers differ from the base's — what the test checks.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script in the vLLM virtualenv
from tests.vllm.tiny_model import HEAD_DIM, HEADS, HIDDEN, KV_HEADS, LAYERS

RANK = 8
#: (module, in_features, out_features) of the tiny Qwen2's linear layers (intermediate = 2 x hidden).
MODULES = {
    "self_attn.q_proj": (HIDDEN, HEADS * HEAD_DIM), "self_attn.k_proj": (HIDDEN, KV_HEADS * HEAD_DIM),
    "self_attn.v_proj": (HIDDEN, KV_HEADS * HEAD_DIM), "self_attn.o_proj": (HEADS * HEAD_DIM, HIDDEN),
    "mlp.gate_proj": (HIDDEN, 2 * HIDDEN), "mlp.up_proj": (HIDDEN, 2 * HIDDEN), "mlp.down_proj": (2 * HIDDEN, HIDDEN),
}


def build(out: Path, base: str) -> None:
    import torch
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(1)
    tensors = {}
    for layer in range(LAYERS):
        for module, (fan_in, fan_out) in MODULES.items():
            prefix = f"base_model.model.model.layers.{layer}.{module}"
            tensors[f"{prefix}.lora_A.weight"] = torch.randn(RANK, fan_in) * 0.5
            tensors[f"{prefix}.lora_B.weight"] = torch.randn(fan_out, RANK) * 0.5
    save_file(tensors, str(out / "adapter_model.safetensors"))
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": base, "r": RANK,
              "lora_alpha": 2 * RANK, "lora_dropout": 0.0, "bias": "none", "fan_in_fan_out": False,
              "target_modules": sorted({m.rsplit(".", 1)[-1] for m in MODULES}), "modules_to_save": None,
              "use_dora": False, "use_rslora": False, "init_lora_weights": True}
    (out / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: tiny_lora.py OUT_DIR BASE_REPO")
    build(Path(sys.argv[1]), sys.argv[2])
