"""The torch model side of the real path: the Llama-style :mod:`~real.model.transformer` (RMSNorm,
RoPE, SwiGLU, grouped-query attention, a KV cache that takes a tree of new tokens), Hugging Face
style :mod:`~real.model.checkpoint` files, Medusa decoding :mod:`~real.model.medusa_heads`, the
byte-level BPE :mod:`~real.model.tokenizer`, and :mod:`~real.model.random_models` (random weights of
real architectures' shapes, for timing)."""
