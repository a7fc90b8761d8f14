"""Errors that HetSpec reports to a user as one clear line (no traceback).

Every package of the project raises subclasses of :class:`HetSpecError` for bad input;
the CLI catches them and prints ``hetspec: error: <message>``.
"""

from __future__ import annotations

from collections.abc import Iterable


#: Exit status of a command whose measurement cannot be trusted (2 stays a bad input): the machine
#: changed under it, or its cores stayed slowed from outside too long to measure.
EXIT_UNTRUSTED = 3


class HetSpecError(ValueError):
    """Bad input: a name, a file or a value the user gave. The message is one line."""


class UntrustedMeasurement(HetSpecError):
    """A measurement the machine would not let be taken, or changed under: one line saying what and by how
    much; the command exits with :data:`EXIT_UNTRUSTED`."""

    exit_code = EXIT_UNTRUSTED


class UnknownNameError(HetSpecError, KeyError):
    """A name (platform, model, device, method, ...) that is not among the valid ones."""

    def __init__(self, what: str, value: str, valid: Iterable[str]):
        self.what, self.value, self.valid = what, value, sorted(valid)
        super().__init__(f"unknown {what} {value!r}; valid: {', '.join(self.valid) or '(none)'}")

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return self.args[0]


class PresetError(HetSpecError):
    """A malformed data file: names the file, the field and what is wrong."""

    def __init__(self, path: str, field: str, problem: str):
        self.path, self.field, self.problem = str(path), field, problem
        super().__init__(f"{self.path}: {field}: {problem}")
