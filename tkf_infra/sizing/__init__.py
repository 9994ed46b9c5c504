"""GPU memory sizing: predict what vLLM prints at start-up and decide whether a model fits.

- `params`: what the engine is asked (`SizingParams`);
- `facts`: what is known about a checkpoint (`ModelFacts`, from models.lock.json);
- `gpus`: every GPU's memory as CUDA reports it, and every name clusters use for it;
- `versions`: per-release overhead physics of vLLM;
- `arch`, `weights`, `kv`: the model's shape, its weights per rank, its KV-cache layout (`kv_v4`: DeepSeek V4's
  compressed-attention caches, packed as vLLM 0.27 lays them out);
- `estimate`: the per-rank figures and the verdict; `suggest`: the way out of a no-fit;
- `contract`: `FitInputs` → `evaluate` → `FitResult`, the fit check's one typed contract;
- `ec2`: GPU facts of EC2 instance types.
"""
