"""``hetspec platforms``, ``hetspec platform show NAME``, ``hetspec models``."""
