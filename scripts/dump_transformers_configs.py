"""Write every architecture's default config.json from transformers' CONFIG_MAPPING, for the config fuzz.

Why: config.json is user input (issue 29) and users bring every architecture transformers knows; each
default config is that architecture's real field layout (per-layer lists, nested text models, MoE and
hybrid keys), the widest corpus of real shapes that can be had offline. tests/test_config_corpus.py sizes
every one and mutations of them. Run with a Python that has transformers, e.g. the vLLM tier's virtualenv
(scripts/install_vllm.sh):

    ~/.cache/tkf-infra/vllm-0.32.0/bin/python scripts/dump_transformers_configs.py \\
        tests/data/transformers_configs.json.gz
"""

from __future__ import annotations

import gzip
import json
import sys
import warnings


def main(out: str) -> int:
    import transformers
    from transformers import CONFIG_MAPPING

    warnings.filterwarnings("ignore")
    configs, failed = {}, []
    for model_type in sorted(CONFIG_MAPPING.keys()):
        try:
            configs[model_type] = json.loads(json.dumps(CONFIG_MAPPING[model_type]().to_dict(), default=str))
        except Exception as exc:  # a config class that cannot be built with no arguments: listed, not fatal
            failed.append(f"{model_type}: {type(exc).__name__}")
    doc = {"source": "transformers CONFIG_MAPPING defaults (scripts/dump_transformers_configs.py)",
           "transformers": transformers.__version__, "not_built": failed, "configs": configs}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    with gzip.GzipFile(out, "wb", compresslevel=9, mtime=0) as f:  # mtime 0: the same bytes every run
        f.write(text)
    print(f"{len(configs)} configs written to {out}; {len(failed)} config classes need arguments")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
