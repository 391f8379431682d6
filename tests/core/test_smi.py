import json

import pytest
from smi_corpus import check_sample

from bot.core.gpu import ProcessListing, SmiErrorKind
from bot.core.smi import decode, detect_format, parse_any, parse_table, read_csv
from bot.errors import ParseError
from tests.conftest import FIXTURES

CORPUS = FIXTURES / "nvidia-smi"
ENTRIES = [json.loads(line) for line in (CORPUS / "index.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["id"] for e in ENTRIES])
def test_corpus_sample_matches_its_expected_facts(entry):
    assert check_sample(entry, (CORPUS / entry["file"]).read_bytes()) == []


def test_every_format_is_represented():
    assert {e["format"] for e in ENTRIES} == {"table", "csv-gpu", "csv-apps", "xml", "q-text", "error"}


@pytest.mark.parametrize("text", [
    "",
    "hello world\n",
    "Segmentation fault (core dumped)\n",
    "<html><body>502 Bad Gateway</body></html>",
])
def test_unknown_output_is_a_typed_error_keeping_raw_text(text):
    with pytest.raises(ParseError) as err:
        parse_any(text)
    assert err.value.raw == text


def test_truncated_xml_is_a_parse_error_not_an_empty_machine():
    text = (CORPUS / "xml/telegraf-a10g.xml").read_text()
    cut = text[: len(text) // 2]
    with pytest.raises(ParseError) as err:
        parse_any(cut)
    assert err.value.kind == "xml-syntax" and err.value.raw == cut


def test_table_cut_before_any_gpu_row_is_an_error():
    text = (CORPUS / "table/cz-580.126.09-l40s-one-proc.txt").read_text()
    head = "\n".join(text.splitlines()[:8])
    with pytest.raises(ParseError):
        parse_table(head)


def test_headerless_csv_needs_its_fields():
    text = (CORPUS / "csv-gpu/hi-a100-name-memtotal-noheader.csv").read_text()
    with pytest.raises(ParseError) as err:
        parse_any(text)
    assert err.value.kind == "csv-headerless"
    snap = parse_any(text, fields=["name", "memory.total"])
    assert snap.gpus[0].memory_total_mib == 81920 and snap.gpus[0].memory_used_mib is None


def test_csv_row_with_wrong_cell_count_is_an_error():
    with pytest.raises(ParseError) as err:
        read_csv("index, name, memory.used [MiB]\n0, A6000\n")
    assert err.value.kind == "csv-row"


def test_utf16_windows_table_is_decoded():
    data = (CORPUS / "table/dx-581.08-win-gtx1650-utf16le.txt").read_bytes()
    snap = parse_any(decode(data))
    assert snap.gpus[0].name == "NVIDIA GeForce GTX 1650" and snap.cuda_version == "13.0"


def test_not_supported_memory_is_unreadable_not_zero():
    snap = parse_any((CORPUS / "table/cslev-580.95.05-gb10-mem-not-supported.txt").read_text())
    gpu = snap.gpus[0]
    assert gpu.memory_used_mib is None and gpu.raw["memory"] == "Not Supported"
    assert "memory" in gpu.unreadable_fields


def test_power_err_is_kept_as_raw():
    snap = parse_any((CORPUS / "table/azure-err-power-fragment.txt").read_text())
    gpu = snap.gpus[0]
    assert gpu.power_draw_w is None and gpu.raw["power_draw"] == "ERR!" and gpu.power_limit_w == 250


def test_container_empty_process_section_is_not_none_found():
    snap = parse_any((CORPUS / "table/ln-515.86.01-node2-near-full-empty-procs.txt").read_text())
    assert snap.process_listing is ProcessListing.EMPTY
    assert snap.gpus[0].memory_used_mib == 24211


def test_error_banner_next_to_table_is_reported():
    table = (CORPUS / "table/cz-580.126.09-l40s-one-proc.txt").read_text()
    banner = (CORPUS / "error/device-handle-gpu-lost.txt").read_text()
    snap = parse_any(table + banner)
    assert snap.gpus and snap.error is not None and snap.error.kind is SmiErrorKind.DEVICE_HANDLE_GPU_LOST


def test_detects_query_csv_with_header():
    text = (CORPUS / "csv-apps/nvdocker1483-host-one-proc.csv").read_text()
    assert detect_format(text) == "csv-apps"
