"""``hetspec step``: the operators of one forward step and their roofline time."""
