"""The kernel: what every floor shares (errors, registries, hashing and the product cache, paths, precision,
MLflow tracking, versions, the process lifecycle, progress lines, host facts, the profiles' settings, tokenizer
and model-surgery helpers). It imports nothing of ours outside itself."""
