"""The P2P matrix of `nvidia-smi topo -p2p r`, from real outputs (tests/fixtures/nvidia-smi/p2p)."""

from bot.core.p2p import parse_p2p_matrix, peer_access_check
from tests.conftest import FIXTURES

P2P = FIXTURES / "nvidia-smi" / "p2p"


def test_an_eight_gpu_node_with_peer_access_everywhere():
    matrix = parse_p2p_matrix((P2P / "h100x8-ok.txt").read_text())
    assert len(matrix) == 8 * 7 and set(matrix.values()) == {"OK"}
    assert peer_access_check(matrix, range(8)) == ("ok", "peer access OK between GPU0-GPU7")


def test_a_chipset_without_p2p_warns_and_names_the_flag():
    matrix = parse_p2p_matrix((P2P / "l4x2-cns.txt").read_text())  # no legend under it
    assert matrix == {(0, 1): "CNS", (1, 0): "CNS"}
    result, detail = peer_access_check(matrix, range(2))
    assert result == "warn" and detail.startswith("GPU0<->GPU1: CNS (Chipset not supported)")
    assert "--disable-custom-all-reduce" in detail
    # one GPU needs no peer: nothing to check
    assert peer_access_check(matrix, range(1))[0] == "ok"


def test_the_newer_legend_and_tabs_with_ansi_underlines_read_the_same():
    text = (P2P / "x2-ok-regkey-legend.txt").read_text()
    assert parse_p2p_matrix(text) == {(0, 1): "OK", (1, 0): "OK"}
    # the published copies had their tabs expanded; nvidia-smi itself separates cells with tabs and, on a
    # terminal, underlines the header: the L4 matrix put back that way reads the same
    import re

    lines = (P2P / "l4x2-cns.txt").read_text().splitlines()
    tabbed = "\n".join(["\t\x1b[4m" + "\t".join(lines[0].split()) + "\x1b[0m"]
                       + [re.sub(r"(?<=\S) +", "\t", line) for line in lines[1:]])
    assert "\t" in tabbed and parse_p2p_matrix(tabbed) == {(0, 1): "CNS", (1, 0): "CNS"}


def test_no_matrix_is_unknown_not_ok():
    smi_error = (FIXTURES / "nvidia-smi" / "error" / "nvml-mismatch-oneline-shine30.txt").read_text()
    assert parse_p2p_matrix(smi_error) == {}
    assert peer_access_check({}, range(2))[0] == "warn"
    # a launch on more GPUs than the matrix lists is not passed as OK
    two = parse_p2p_matrix((P2P / "l4x2-cns.txt").read_text())
    assert peer_access_check(two, range(4))[0] == "warn"


def test_a_launch_placed_by_base_gpu_id_is_judged_on_its_own_gpus():
    """--base-gpu-id 2 --tp 2 runs on GPU2 and GPU3: a pair without peer access elsewhere on the node is not its
    concern, its own pair is (the real eight-GPU matrix with one pair marked as the L4s' chipset reports it)."""
    matrix = parse_p2p_matrix((P2P / "h100x8-ok.txt").read_text())
    matrix[(0, 1)] = matrix[(1, 0)] = "CNS"
    assert peer_access_check(matrix, (2, 3)) == ("ok", "peer access OK between GPU2-GPU3")
    assert peer_access_check(matrix, (0, 2)) == ("ok", "peer access OK between GPU0, GPU2")  # --gpu-id-step 2
    result, detail = peer_access_check(matrix, (1, 0))
    assert result == "warn" and detail.startswith("GPU0<->GPU1: CNS")
