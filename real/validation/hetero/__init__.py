"""The heterogeneous section of ``hetspec validate``: hcmp ratio sweep, dovetail placements, ALSpec,
weight streaming."""
