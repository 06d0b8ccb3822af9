"""What a non-editable install ships: every subpackage is listed."""
import os
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_subpackage_is_in_the_wheel():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        listed = set(tomllib.load(f)["tool"]["setuptools"]["packages"])
    found = set()
    for dirpath, _, files in os.walk(os.path.join(ROOT, "gpu_dedup")):
        if "__init__.py" in files and "__pycache__" not in dirpath:
            rel = os.path.relpath(dirpath, ROOT).replace(os.sep, ".")
            found.add(rel)
    assert found <= listed, f"not in [tool.setuptools] packages: {sorted(found - listed)}"
    assert {"gpu_dedup.kernels", "gpu_dedup.configs"} <= listed
