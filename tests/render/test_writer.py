"""The one disk writer: atomic, inside DIR only, never clobbering someone else's files."""

import os
import socket
import stat
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


def test_a_symlinked_out_is_refused_and_left_as_it_is(tmp_path):
    """Issue 13: the swap used to rename the link away and put a directory in its place."""
    real = tmp_path / "real"
    write_tree({PurePosixPath("a.txt"): "1"}, real)
    link = tmp_path / "build"
    link.symlink_to(real)
    with pytest.raises(RenderWriteError, match="symbolic link"):
        write_tree({PurePosixPath("a.txt"): "2"}, link)
    assert link.is_symlink() and (real / "a.txt").read_text() == "1"


@pytest.mark.parametrize("make", [os.mkfifo, lambda p: socket.socket(socket.AF_UNIX).bind(str(p))])
def test_a_fifo_or_socket_as_out_is_refused(tmp_path, make):
    target = tmp_path / "out"
    make(target)
    with pytest.raises(RenderWriteError, match="not a directory"):
        write_tree({PurePosixPath("a.txt"): "1"}, target)
    assert not stat.S_ISDIR(os.lstat(target).st_mode)


def test_leftovers_of_a_killed_render_are_removed_on_the_next(tmp_path):
    out = tmp_path / "build"
    write_tree({PurePosixPath("a.txt"): "1"}, out)
    # What a render killed mid-way leaves: its staging (marker first) and a swap's .old.
    for name in (".build.k1ll3d_x", ".build.k1ll3d_y.old", ".build.emptyxyz"):
        (tmp_path / name).mkdir()
    (tmp_path / ".build.k1ll3d_x" / MARKER).write_text("")
    (tmp_path / ".build.k1ll3d_y.old" / MARKER).write_text("")
    foreign = tmp_path / ".build.notours1"
    foreign.mkdir()
    (foreign / "notes.md").write_text("someone's")
    write_tree({PurePosixPath("a.txt"): "2"}, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".build.notours1", "build"]
    assert (out / "a.txt").read_text() == "2"


def test_the_swap_is_one_exchange_on_linux(tmp_path):
    """renameat2(RENAME_EXCHANGE): the tree is never absent, which is what 'atomically' promises."""
    from fleetspec.render.writer import _exchange

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "x").write_text("a")
    assert _exchange(a, b)
    assert (b / "x").read_text() == "a" and not (a / "x").exists()


class _Part(dict):  # a dict that a weak reference can follow
    pass


def test_parts_are_written_one_at_a_time_and_let_go(tmp_path):
    import weakref

    from fleetspec.render.writer import write_parts

    out = tmp_path / "out"
    seen = []

    def parts():
        first = _Part({PurePosixPath("fleet.json"): "{}\n"})
        gone = weakref.ref(first)
        yield first
        del first
        seen.append(gone() is None)  # the writer holds no part while the next is made
        yield {PurePosixPath("slurm/slurm.conf"): "ClusterName=a\n", PurePosixPath("ansible/x.yml"): ""}

    assert write_parts(parts(), out) == [PurePosixPath("ansible/x.yml"), PurePosixPath("fleet.json"),
                                         PurePosixPath("slurm/slurm.conf")]
    assert seen == [True]
    assert (out / "fleet.json").read_text() == "{}\n" and (out / "ansible" / "x.yml").read_text() == ""


@pytest.mark.parametrize("second", [{PurePosixPath("a.txt"): "again"}, {PurePosixPath("../b.txt"): "out"}])
def test_a_later_part_that_clashes_or_escapes_leaves_the_old_tree(tmp_path, second):
    from fleetspec.render.writer import write_parts

    out = tmp_path / "out"
    write_tree({PurePosixPath("old.txt"): "old"}, out)
    with pytest.raises((ValueError, RenderWriteError)):
        write_parts([{PurePosixPath("a.txt"): "a"}, second], out)
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "old.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging left behind
