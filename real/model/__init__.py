"""The torch model side of the real path: the Llama-style :mod:`~real.model.transformer` (RMSNorm,
RoPE, SwiGLU, grouped-query attention, a KV cache that takes a tree of new tokens), Hugging Face
style :mod:`~real.model.checkpoint` files, llama.cpp's :mod:`~real.model.gguf` files (dequantized on load),
either by path (:mod:`~real.model.sources`), Medusa decoding :mod:`~real.model.medusa_heads`, the
byte-level BPE :mod:`~real.model.tokenizer`, :mod:`~real.model.random_models` (random weights of
real architectures' shapes, for timing), and how a model runs on a device: :mod:`~real.model.placement`
(``--device`` / ``--dtype`` / ``--graphs``), :mod:`~real.model.packing` (weight layouts for inference)
and :mod:`~real.model.executor` (static-shape forwards in token-count buckets, CUDA graphs)."""
