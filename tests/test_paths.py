"""The one guard between a name read from data and a path on disk."""
from __future__ import annotations

import os

import pytest

from gpu_dedup.errors import InputError
from gpu_dedup.paths import contained


@pytest.mark.parametrize("name", ["../x", "a/../../x", "/etc/passwd", "", ".", "a//b",
                                  "a\\..\\b", "a/./b", "x\x00y", "..", "a/.."])
def test_names_that_are_not_plain_and_relative_are_refused(tmp_path, name):
    with pytest.raises(InputError, match="state.json"):
        contained(str(tmp_path), name, "state.json")


def test_a_plain_name_is_joined(tmp_path):
    assert contained(str(tmp_path), "a/b.arrow", "w") == os.path.join(str(tmp_path), "a/b.arrow")


def test_a_link_inside_the_folder_that_points_out_is_refused(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", root / "link")
    with pytest.raises(InputError, match="leads outside"):
        contained(str(root), "link/x.arrow", "state.json")
