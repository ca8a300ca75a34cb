"""The offline world: arithmetic problems, the toy tokenizer and model, teacher traces."""
