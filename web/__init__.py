"""The what-if page (``hetspec serve``): a local web page over the simulator.

It imports only ``sim`` and ``hwmodels`` (never ``real`` or torch), so it starts fast and answers from
the same functions as ``hetspec predict``, ``step`` and ``simulate``. Its server's packages come with
``pip install 'hetspec[web]'``.
"""
