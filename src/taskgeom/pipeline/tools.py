"""The versions of DVC and Snakemake whose internals the pipeline patches or imitates, checked
when it loads them.

``dvc_atomic`` replaces DVC's ``dvc.rwlock._edit_rwlock``, ``dvc.stage.cache._can_hash`` and the
``_dump_data`` of ``dvc.utils.serialize._common`` and ``_yaml``; ``dvc_lock_parse`` replaces
``_yaml.parse_yaml_for_update``; ``dvc_commit`` passes ``Repo(_wait_for_lock=True)``; ``sync``
writes Snakemake's private ``.snakemake/metadata`` records in its record format. None of these is
a public interface: another release may rename them, change their arguments or their file
layout, and a patch that misses would leave the files unprotected, or Snakemake misreading its
records, without an error. So each of these tools is used only at the version the tests ran
(``TESTED``; pyproject.toml pins the same, and ``tests/test_tools.py`` checks that they agree with
it and with envs/requirements.lock, and that every name patched still has the signature wrapped).
``require`` stops the process with one line naming the installed version and the expected one.
"""

from __future__ import annotations

from importlib import metadata

TESTED = {"dvc": "3.67.1", "snakemake": "9.27.1"}  # distribution -> the version the tests ran
USE = {
    "dvc": "patches DVC internals (pipeline/dvc_atomic.py, dvc_lock_parse.py, dvc_commit.py)",
    "snakemake": "writes Snakemake's private job records (pipeline/sync.py)",
}


def mismatch(name: str) -> str | None:
    """One line saying how the installed ``name`` differs from ``TESTED[name]``, or None if it does not."""
    expected = TESTED[name]
    try:
        installed = metadata.version(name)
    except metadata.PackageNotFoundError:
        installed = None
    if installed == expected:
        return None
    found = f"{name} {installed} is installed" if installed else f"{name} is not installed"
    return (f"taskgeom: {found}, but taskgeom {USE[name]} tested with {name}=={expected} only: "
            f"install {name}=={expected} (`bash envs/setup-venv.sh` installs the lock)")


def require(*names: str) -> None:
    """Stop the process (SystemExit with one line) unless each of ``names`` is at its tested version."""
    for name in names:
        if (line := mismatch(name)) is not None:
            raise SystemExit(line)
