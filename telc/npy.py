"""One array from a NumPy file named on the command line (`telc run --input NAME=FILE`,
`telc build --value NAME=@FILE`): every way the file can be wrong is an NpyError whose message
says what, for the caller to put after its own description of the option."""

from __future__ import annotations

import zipfile

import numpy as np


class NpyError(Exception):
    """`path: what is wrong with it`."""


def read_array(path: str, key: str | None = None) -> np.ndarray:
    """The array of the .npy file at `path`; with `key`, an .npz archive is read too: its array
    `key`, or its only one (without `key` an archive is refused)."""
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
        if magic != b"\x93NUMPY" and not magic.startswith(b"PK\x03\x04"):
            raise NpyError(f"{path}: not a NumPy .npy file (save one with numpy.save)")
        loaded = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise NpyError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise NpyError(f"{path}: is a directory") from None
    except OSError as e:
        raise NpyError(f"{path}: {e.strerror or e}") from None
    except (ValueError, EOFError, zipfile.BadZipFile) as e:
        raise NpyError(f"{path}: not a NumPy .npy file ({e})") from None
    if isinstance(loaded, np.lib.npyio.NpzFile):
        with loaded:
            keys = list(loaded.keys())
            if key is None:
                raise NpyError(f"{path}: an .npz archive; give one array, an .npy file")
            if key in keys or len(keys) == 1:
                return np.asarray(loaded[key if key in keys else keys[0]])
        raise NpyError(f"{path}: the archive holds {', '.join(keys) or 'nothing'}, not '{key}'")
    return np.asarray(loaded)
