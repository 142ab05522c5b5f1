"""High-level API: models, contexts, tokenizer, completion."""
