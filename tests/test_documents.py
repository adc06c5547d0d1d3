"""Hostile files given where a design file, a design space, an area table or a request mix is
read: each refused at once with a ValueError naming the file and what is wrong, none
expanded, parsed whole past the limit, waited on, or read as another number."""

from __future__ import annotations

import json
import os
import socket

import pytest
import yaml

from tenet_byoc import Accelerator
from tenet_byoc.area import AreaTable
from tenet_byoc.documents import MAX_DOCUMENT_BYTES, MAX_NODES, load_document, read_text
from tenet_byoc.dse import DesignSpace, check_ray_address
from tenet_byoc_cli import main
from tenet_byoc.experiments.serving import parse_requests
from tenet_byoc.accelerators import preset

READERS = {
    "accelerator file": Accelerator.from_file,
    "design space": DesignSpace.from_file,
    "area table": AreaTable.load,
    "request file": parse_requests,
}

# Nine aliases per level, nine levels: 9^9 (387 million) strings once written out, in 300
# bytes (the 400-byte case expanded for 87 s to 6.4 GB on its way to JSON).
LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8))
def hostile(tmp_path, suffix: str) -> dict[str, object]:
    """name -> (path, the words the refusal must hold)."""
    cases = {}

    def case(name, data, *words):
        path = tmp_path / f"{name}{suffix}"
        (path.write_bytes if isinstance(data, bytes) else path.write_text)(data)
        cases[name] = (path, words)

    case("latin1", "name: caf\xe9\n".encode("latin-1"), "not UTF-8", "0xe9 at offset 9")
    case("deep", "[" * 500 + "]" * 500, "deeper than 64 levels")
    big = tmp_path / f"big{suffix}"
    with open(big, "wb") as f:  # 100 MB, sparse: refused by its size, never read
        f.truncate(100 << 20)
    cases["big"] = (big, ("104,857,600 bytes; at most",))
    fifo = tmp_path / f"fifo{suffix}"
    os.mkfifo(fifo)  # opening it to read would wait for a writer for ever
    cases["fifo"] = (fifo, ("FIFO",))
    folder = tmp_path / f"folder{suffix}"
    folder.mkdir()
    cases["folder"] = (folder, ("directory",))
    if suffix == ".yaml":
        case("laughs", LAUGHS, f"more than {MAX_NODES:,} values")
        case("repeated", "{45: 0.346, 45.0: 99}\n", "key 45.0 on line 1 repeats key 45")
        case("nan", "clock_ghz: .nan\nrows: [.inf]\n", "must be finite")
    else:
        case("repeated", '{"a": 1, "a": 2}', "'a' appears twice")
        case("nan", '{"clock_ghz": NaN}', "NaN is not a number JSON allows")
    return cases


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
@pytest.mark.parametrize("what", list(READERS))
def test_hostile_files_are_refused_naming_the_file(tmp_path, what, suffix):
    if what == "request file" and suffix == ".yaml":
        suffix = ".csv"  # request mixes are JSON or CSV
    for name, (path, words) in hostile(tmp_path, suffix).items():
        if suffix == ".csv" and name not in ("latin1", "big", "fifo", "folder"):
            continue
        with pytest.raises((ValueError, FileNotFoundError)) as err:
            READERS[what](path)
        text = str(err.value)
        assert str(path) in text and what in text, (name, text)
        for word in words:
            assert word in text, (name, text)


def test_the_size_limit_is_checked_before_reading(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text("x" * MAX_DOCUMENT_BYTES)
    assert len(read_text(path, "design space")) == MAX_DOCUMENT_BYTES
    path.write_text("x" * (MAX_DOCUMENT_BYTES + 1))
    with pytest.raises(ValueError, match=f"is {MAX_DOCUMENT_BYTES + 1:,} bytes; at most "
                                         f"{MAX_DOCUMENT_BYTES:,} are read"):
        read_text(path, "design space")


def test_a_missing_file_and_a_fifo_are_told_apart(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_document(tmp_path / "none.yaml", "design space")
    os.mkfifo(tmp_path / "pipe.json")
    with pytest.raises(ValueError, match=r"is a FIFO \(named pipe\), not a regular file"):
        load_document(tmp_path / "pipe.json", "design space")


def test_an_area_table_node_given_twice_is_refused(tmp_path):
    # JSON keys are strings: "45" and "45.0" are two keys there but one node (nm).
    path = tmp_path / "area.json"
    path.write_text('{"sram_bitcell_um2": {"45": 0.346, "45.0": 99}}')
    with pytest.raises(ValueError, match=r"area.json: sram_bitcell_um2 gives node 45 nm twice "
                                         r"\(as '45' and '45.0'\)"):
        AreaTable.load(path)


def test_the_nan_names_its_field(tmp_path):
    form = json.loads(preset("os16").to_json())
    path = tmp_path / "design.yaml"
    path.write_text(yaml.safe_dump(form).replace("clock_ghz: 1.0", "clock_ghz: .nan"))
    with pytest.raises(ValueError, match=r"design.yaml'.*hardware.clock_ghz is nan"):
        Accelerator.from_file(path)


def test_ordinary_files_still_read_as_pyyaml_and_json_read_them(tmp_path):
    # The reference: PyYAML's own safe loader and the json module on the same text.
    form = json.loads(preset("ws16").to_json())
    for suffix, text in ((".yaml", yaml.safe_dump(form)), (".json", json.dumps(form))):
        path = tmp_path / f"design{suffix}"
        path.write_text(text)
        assert load_document(path, "x") == form
        assert Accelerator.from_file(path).to_json() == preset("ws16").to_json()
    # Anchors, aliases and merge keys that override are YAML a user may write.
    path = tmp_path / "anchors.yaml"
    path.write_text("base: &b {x: 1, y: [1, 2]}\nthing:\n  <<: *b\n  x: 3\nagain: *b\n")
    assert load_document(path, "x") == yaml.safe_load(path.read_text())


def test_request_lengths_must_be_whole_numbers(tmp_path):
    path = tmp_path / "mix.json"
    path.write_text("[[12.7, 3.9]]")
    with pytest.raises(ValueError, match=r"mix.json.*prompt_len 12.7 is not a whole number"):
        parse_requests(path)
    path.write_text('[{"prompt_len": 12, "output_len": true}]')
    with pytest.raises(ValueError, match="output_len True is not a whole number"):
        parse_requests(path)
    path.write_text('[[12, 3], {"prompt_len": 7, "output_len": 2}]')
    assert [(r.prompt_len, r.output_len) for r in parse_requests(path)] == [(12, 3), (7, 2)]
    csv_path = tmp_path / "mix.csv"
    csv_path.write_text("prompt_len,output_len\n12,3\n5.5,2\n")
    with pytest.raises(ValueError, match=r"line 3 of .*mix.csv.*prompt_len '5.5'"):
        parse_requests(csv_path)
    with pytest.raises(ValueError, match="output_len '3.9' is not a whole number"):
        parse_requests("12:3.9")


@pytest.mark.parametrize("value", ["-5", "0", "nan", "inf"])
def test_link_figures_must_be_positive_and_finite(capsys, value):
    with pytest.raises(SystemExit) as exc:
        main(["estimate", f"--link-gbps={value}", "--no-progress"])
    assert exc.value.code == 2
    assert f"--link-gbps: expected GB/s > 0, got '{value}'" in capsys.readouterr().err


def test_a_ray_address_nothing_answers_at_is_refused():
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        with pytest.raises(ValueError, match=rf"--ray-address '{address}': nothing answers"):
            check_ray_address(address)
    with pytest.raises(ValueError, match="expected HOST:PORT"):
        check_ray_address("127.0.0.1")
    with socket.socket() as s:  # and one where something does
        s.bind(("127.0.0.1", 0))
        s.listen()
        check_ray_address(f"127.0.0.1:{s.getsockname()[1]}")
