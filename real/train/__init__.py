"""Demo models trained on the Python standard library's sources.

Entry point: :func:`real.train.demo.load_demo` (``hetspec train-demo``, :mod:`real.train.commands`)
returns the cached models of a preset, training them first if the cache lacks them. Behind it:
:mod:`~real.train.recipe` (the presets' shapes and step counts), :mod:`~real.train.pipeline` (corpus
-> tokenizer -> target -> draft -> Medusa heads, and the summary), :mod:`~real.train.loops` (the
training loops), :mod:`~real.train.corpus` (the standard library split by file),
:mod:`~real.train.generate` / :mod:`~real.train.evaluate` (target continuations, metrics) and
:mod:`~real.train.timing` (forward times of the trained models)."""
