import pytest

from fleetspec.spec.loader import MAX_FILE_BYTES, SpecLoadError, load_bytes, load_file, load_text


def test_positions_of_keys_and_values():
    loaded = load_text("a:\n  b: 1\n  c:\n    - x\n    - {d: y}\n", "f.yaml")
    src = loaded.source
    assert loaded.data == {"a": {"b": 1, "c": ["x", {"d": "y"}]}}
    assert src.keys[("a", "b")].line == 2 and src.keys[("a", "b")].column == 3
    assert src.values[("a", "c", 1, "d")].line == 5
    assert src.locate(("a", "c", 1, "missing", "deeper")).line == 5  # nearest ancestor


def test_duplicate_keys_are_refused():
    with pytest.raises(SpecLoadError, match=r"duplicate key 'b' \(first defined at line 2\)") as exc:
        load_text("a:\n  b: 1\n  b: 2\n", "f.yaml")
    assert (exc.value.line, exc.value.column) == (3, 3)


def test_alias_bomb_is_refused_quickly():
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for i in range(1, 9):
        prev, cur = chr(96 + i), chr(97 + i)
        lines.append(f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]")
    with pytest.raises(SpecLoadError, match="alias bomb"):
        load_text("\n".join(lines) + "\n", "bomb.yaml")


def test_small_aliases_still_work():
    data = load_text("base: &b {count: 8}\nother: *b\n").data
    assert data["other"] == {"count": 8}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("x: !!python/object/apply:os.system ['true']\n", "not allowed"),
        ("x: !custom 1\n", "not allowed"),
        ("a: [\n", "invalid YAML"),
        ("", "empty"),
        ("# only a comment\n", "empty"),
        ("a: " + "[" * 100 + "]" * 100 + "\n", "nesting deeper"),
        ("<<: {a: 1}\n", "merge keys"),
        ("? [a, b]\n: 1\n", "plain strings"),
    ],
)
def test_hostile_or_broken_input(text, fragment):
    with pytest.raises(SpecLoadError, match=fragment):
        load_text(text, "f.yaml")


def test_non_utf8_points_at_the_byte():
    with pytest.raises(SpecLoadError, match="not UTF-8") as exc:
        load_bytes(b"a: 1\nb: \xff\xfe\n", "f.yaml")
    assert (exc.value.line, exc.value.column) == (2, 4)


def test_huge_file_is_refused_without_reading(tmp_path):
    big = tmp_path / "big.yaml"
    with open(big, "wb") as fh:
        fh.truncate(MAX_FILE_BYTES + 1)
    with pytest.raises(SpecLoadError, match="fleetspec reads fleet files up to"):
        load_file(big)


def test_directory_and_missing_file(tmp_path):
    with pytest.raises(SpecLoadError, match="is a directory"):
        load_file(tmp_path)
    with pytest.raises(SpecLoadError, match="no such file"):
        load_file(tmp_path / "nope.yaml")


def test_unquoted_numbers_keep_their_text():
    loaded = load_text("cuda: 12.10\nversion: 1.30\ncount: 8\n")
    assert loaded.data == {"cuda": 12.1, "version": 1.3, "count": 8}
    assert loaded.source.numbers[("cuda",)] == "12.10"
    assert loaded.source.numbers[("version",)] == "1.30"
