"""Hardware models: devices, links, memory domains, platforms and roofline operator timing.

This package imports nothing else of HetSpec and never imports torch.
"""
