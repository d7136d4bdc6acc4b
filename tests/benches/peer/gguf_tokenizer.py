"""Writes a Hugging Face tokenizer directory from a GGUF file's own
tokenizer (what llama.cpp tokenizes with), for a peer benchmark client that
loads tokenizers by path: tokenizer.json and a minimal tokenizer_config.json.

Usage: python gguf_tokenizer.py MODEL.gguf OUT_DIR

Reads the GGUF with the `gguf` package and converts with transformers' own
GGUF tokenizer mapping, which needs no torch. Offline.
"""

import importlib
import json
import pathlib
import sys

from gguf import GGUFReader


def main(gguf_path: str, out: str) -> None:
    mapping = importlib.import_module(
        "transformers.integrations.gguf.gguf_tokenizer_mapping"
    )
    reader = GGUFReader(gguf_path)
    meta = {
        k: f.contents()
        for k, f in reader.fields.items()
        if k.startswith("tokenizer.") or k == "general.architecture"
    }
    grouped = {
        group: {
            name: meta[f"tokenizer.{key}"]
            for key, name in renames.items()
            if f"tokenizer.{key}" in meta
        }
        for group, renames in mapping.GGUF_TOKENIZER_MAPPING.items()
    }
    tokenizer, _ = mapping.convert_gguf_tokenizer(
        meta["general.architecture"], grouped["tokenizer"]
    )
    dest = pathlib.Path(out)
    dest.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(dest / "tokenizer.json"))
    tokens = meta["tokenizer.ggml.tokens"]
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 32768}
    for name, key in (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id")):
        if f"tokenizer.ggml.{key}" in meta:
            config[name] = tokens[int(meta[f"tokenizer.ggml.{key}"])]
    (dest / "tokenizer_config.json").write_text(json.dumps(config))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
