"""Exceptions raised by the library. The CLI turns them into one line and exit status 2."""


class DedupError(Exception):
    """A problem with the user's input, configuration or environment.

    The message is one line that names the file, line and field (or option)
    at fault and, where it can, says how to fix it.
    """


class InputError(DedupError):
    """Malformed or inconsistent input data."""


class ConfigError(DedupError):
    """An invalid combination of options."""


class DeviceError(DedupError):
    """The requested device cannot be used."""


class ModelError(DedupError):
    """An embedding model that cannot be found or read (models are never downloaded)."""
