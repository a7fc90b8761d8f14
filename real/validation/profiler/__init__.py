"""The measured operator profiler of a torch device (``hetspec calibrate --device D``)."""
