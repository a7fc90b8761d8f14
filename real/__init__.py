"""The real PyTorch execution path: a Llama-style model, demo models trained on the Python
standard library, the decode methods, traces and the validation harness."""
