"""The heterogeneous real path: decode methods whose work is placed on several workers.

- :mod:`real.hetero.hcmp`: Ghidorah's hetero-core model parallelism (Medusa verification with
  every linear split by output columns at ratio r, attention split dense / sparse and merged by
  online softmax; the split model is :mod:`real.hetero.split_model`);
- :mod:`real.hetero.dovetail`: Dovetail (the drafter on one worker, target verification on
  another, explicit timed transfers; token drafter or the Dynamic-Gating-Fusion drafter of
  :mod:`real.hetero.dgf_drafter`);
- :mod:`real.hetero.alspec`: ALSpec attention-level speculation (sink + window attention checked
  by a norm test, the rest of the layer overlapped on a second worker);
- :mod:`real.hetero.streaming`: LLMCad's weight streaming for ``draft-tree`` (target layers read
  from safetensors under a memory budget by a loader thread while the draft drafts).

Workers are :mod:`real.run.worker`, several at once :mod:`real.hetero.workers`. This module is torch-free: it
only names the decoder modules (the registry of :mod:`real.decode` includes them), so checking a method name
stays cheap.
"""

from __future__ import annotations

#: method name -> module implementing it and its config class (same contract as real.decode).
HETERO_DECODER_MODULES: dict[str, tuple[str, str]] = {
    "hcmp": ("real.hetero.hcmp", "HcmpConfig"),
    "dovetail": ("real.hetero.dovetail", "DovetailConfig"),
    "alspec": ("real.hetero.alspec", "AlspecConfig"),
}
