"""The one disk writer: atomic, inside DIR only, never clobbering someone else's files."""

from pathlib import PurePosixPath

import pytest

from fleetspec.render.writer import MARKER, RenderWriteError, write_tree


@pytest.mark.parametrize("bad", ["../escape.txt", "/etc/passwd", "a/../../b", "..", ""])
def test_paths_cannot_leave_the_output_directory(tmp_path, bad):
    out = tmp_path / "out"
    with pytest.raises(RenderWriteError, match="must stay inside"):
        write_tree({PurePosixPath("ok.txt"): "ok", bad: "x"}, out)
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no staging left behind


def test_replaces_its_own_tree_whole(tmp_path):
    out = tmp_path / "out"
    write_tree({PurePosixPath("a/one.txt"): "1", PurePosixPath("b.txt"): "b"}, out)
    write_tree({PurePosixPath("a/two.txt"): "2"}, out)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [MARKER, "a/two.txt"]


def test_a_failure_mid_write_leaves_the_old_tree(tmp_path, monkeypatch):
    out = tmp_path / "out"
    write_tree({PurePosixPath("keep.txt"): "old"}, out)


    def explode(*args, **kwargs):
        raise OSError(28, "No space left on device")

    import fleetspec.render.writer as writer

    monkeypatch.setattr(writer, "_swap", explode)
    with pytest.raises(OSError):
        write_tree({PurePosixPath("new.txt"): "new"}, out)
    assert (out / "keep.txt").read_text() == "old" and not (out / "new.txt").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_refuses_foreign_directories_and_files(tmp_path):
    (tmp_path / "notes.md").write_text("mine")
    with pytest.raises(RenderWriteError, match="not written by fleetspec"):
        write_tree({PurePosixPath("x"): "y"}, tmp_path)
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(RenderWriteError, match="not a directory"):
        write_tree({PurePosixPath("x"): "y"}, f)
