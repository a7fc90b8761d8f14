"""Run records: the self-contained folder a measuring command writes (report, ``results.json``, plots and
``machine.json``), and the index of the committed ones (``reports/runs/INDEX.md``).

Start here: :mod:`sim.records.machine` says what ``machine.json`` holds; :mod:`sim.records.index` builds the
index from every run folder's ``results.json`` and ``machine.json``.
"""

from sim.records.machine import MACHINE_FILE, RESULTS_FILE, machine_facts, machine_slug, write_machine_json

__all__ = ["MACHINE_FILE", "RESULTS_FILE", "machine_facts", "machine_slug", "write_machine_json"]
