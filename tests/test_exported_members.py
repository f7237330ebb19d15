"""The public Python API is exactly what `gitmem.__all__` lists."""

import gitmem


def test_all_members_exist() -> None:
    for name in gitmem.__all__:
        assert hasattr(gitmem, name), name


def test_public_names_are_listed() -> None:
    public = {n for n in dir(gitmem) if not n.startswith("_") and n[0].isupper()}
    assert public <= set(gitmem.__all__)
