"""A launch's flags read the way the installed SGLang's argparse reads them, against its own option strings."""

import argparse
import contextlib
import io
import json

import pytest

from bot.core.argv import SGLANG_ENV_MARK, SGLANG_FLAGS_MARK
from bot.core.flags import ALIASES, MODELLED, PASSTHROUGH
from bot.core.installed_flags import (
    GPUOPS_TABLE,
    InstalledFlags,
    corrected_argv,
    flag_problems,
    near_miss_notes,
    parse_env_names,
    parse_installed_flags,
    typo_distance,
    unread_env,
)


def sglang_like_parser() -> argparse.ArgumentParser:
    """A parser shaped like SGLang's launch parser: aliases, switches, a list-valued flag, prefixes shared."""
    parser = argparse.ArgumentParser(prog="launch_server.py")
    parser.add_argument("--model-path", "--model")
    parser.add_argument("--tp-size", "--tp", "--tensor-parallel-size", type=int)
    parser.add_argument("--context-length", type=int)
    parser.add_argument("--mem-fraction-static", type=float)
    parser.add_argument("--enable-torch-compile", action="store_true")
    parser.add_argument("--enable-hierarchical-cache", action="store_true")
    parser.add_argument("--cuda-graph-bs", type=int, nargs="+")
    parser.add_argument("--cuda-graph-max-bs", type=int)
    parser.add_argument("--json-model-override-args")
    return parser


def installed_from(parser: argparse.ArgumentParser) -> InstalledFlags:
    """What ``argv.SGLANG_FLAGS_SCRIPT`` prints for this parser, read back."""
    options = {o: a.nargs != 0 for a in parser._actions for o in a.option_strings}
    return parse_installed_flags("INFO importing sglang ...\n" + SGLANG_FLAGS_MARK + json.dumps(options) + "\n")


def argparse_accepts(parser: argparse.ArgumentParser, argv: list[str]) -> bool:
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            parser.parse_args(argv)
        except SystemExit:
            return False
    return True


ARGVS = [
    ["--tp", "2", "--context-length", "65536"],
    ["--tp-size=2", "--enable-torch-compile"],
    ["--context-lenght", "32768"],
    ["--mem-frac", "0.85"],  # a unique abbreviation, as argparse allows
    ["--cuda-graph", "8"],  # ambiguous: --cuda-graph-bs, --cuda-graph-max-bs
    ["--cuda-graph-bs", "1", "2", "4", "--tp", "2"],
    ["--enable-hierarchical-cache", "--mem-fraction-static", "0.8"],
    ["--json-model-override-args", '{"rope_scaling": {"factor": 4}}'],
    ["--enable-torch-compiles"],
    ["--model", "/models/x", "--tensor-parallel-size", "2"],
    ["--speculative-algorithm", "NEXTN"],
]


@pytest.mark.parametrize("argv", ARGVS)
def test_a_launch_has_a_problem_exactly_when_sglangs_argparse_would_refuse_its_flags(argv):
    parser = sglang_like_parser()
    problems = flag_problems(installed_from(parser), argv)
    assert (problems == ()) == argparse_accepts(parser, argv), problems


def test_a_mistyped_flag_is_named_with_the_one_it_most_likely_meant_and_corrected_keeping_values():
    installed = installed_from(sglang_like_parser())
    argv = ("--tp", "2", "--context-lenght", "32768", "--enable-torch-compiles", "--mem-fraction-static=0.85")
    problems = flag_problems(installed, argv)
    assert [(p.given, p.correction) for p in problems] == [("--context-lenght", "--context-length"),
                                                           ("--enable-torch-compiles", "--enable-torch-compile")]
    assert problems[0].describe("SGLang 0.5.9") == \
        "SGLang 0.5.9 has no `--context-lenght` (did you mean `--context-length`?)"
    assert corrected_argv(argv, problems) == ("--tp", "2", "--context-length", "32768", "--enable-torch-compile",
                                              "--mem-fraction-static=0.85")
    assert argparse_accepts(sglang_like_parser(), list(corrected_argv(argv, problems) or ()))
    # `--flag=value` keeps its value through the correction
    (typo,) = flag_problems(installed, ["--context-lenght=4096"])
    assert corrected_argv(["--context-lenght=4096"], (typo,)) == ("--context-length=4096",)


def test_an_ambiguous_abbreviation_and_a_flag_with_nothing_close_have_no_correction():
    installed = installed_from(sglang_like_parser())
    (ambiguous,) = flag_problems(installed, ["--cuda-graph", "8"])
    assert ambiguous.ambiguous and ambiguous.meant == ("--cuda-graph-bs", "--cuda-graph-max-bs")
    assert ambiguous.describe("SGLang 0.5.9") == ("`--cuda-graph` is ambiguous in SGLang 0.5.9: it could be "
                                                  "`--cuda-graph-bs`, `--cuda-graph-max-bs`")
    (newer,) = flag_problems(installed, ["--speculative-algorithm", "NEXTN"])
    assert newer.meant == () and newer.correction is None
    assert newer.describe("SGLang 0.5.9") == "SGLang 0.5.9 has no `--speculative-algorithm`"
    assert corrected_argv(["--cuda-graph", "8"], (ambiguous,)) is None


def test_output_without_the_flag_list_is_refused():
    with pytest.raises(ValueError, match="no flag list"):
        parse_installed_flags("Traceback (most recent call last):\nModuleNotFoundError: No module named 'torch'\n")
    with pytest.raises(ValueError, match="not a map"):
        parse_installed_flags(SGLANG_FLAGS_MARK + '{"tp": 1}')
    with pytest.raises(ValueError, match="over 262,144 characters"):  # it is kept in Redis: bounded
        parse_installed_flags(SGLANG_FLAGS_MARK + json.dumps({f"--flag-{i}": True for i in range(20_000)}))


def test_gpuops_own_table_knows_every_flag_and_alias_it_parses():
    for flag in (*MODELLED, *PASSTHROUGH, *ALIASES):
        assert flag_problems(GPUOPS_TABLE, [flag, "1"] if GPUOPS_TABLE.options[flag] else [flag]) == ()
    assert GPUOPS_TABLE.options["--enable-torch-compile"] is False and GPUOPS_TABLE.options["--tp"] is True


@pytest.mark.parametrize("a, b, edits", [
    ("--context-lenght", "--context-length", 1),  # two letters swapped
    ("--kv-cache-type", "--kv-cache-dtype", 1),  # one dropped
    ("--tp-sizes", "--tp-size", 1),  # one added
    ("--mem-fraction-statik", "--mem-fraction-static", 1),  # one changed
    ("--cuda-graph-bs", "--cuda-graph-max-bs", 4),  # a different flag, not a typo of it
    ("kitten", "sitting", 3),
    ("", "abc", 3),
])
def test_typo_distance_counts_the_edits_a_typo_makes(a, b, edits):
    assert typo_distance(a, b) == edits == typo_distance(b, a)


def test_a_different_flag_sharing_a_long_prefix_is_not_offered_as_the_meaning():
    """SGLang's --cuda-graph-bs is not a typo of --cuda-graph-max-bs, nor --speculative-adaptive (a newer flag) of
    --speculative-algorithm: neither is suggested, so no button launches something the user did not write."""
    installed = installed_from(sglang_like_parser())
    assert flag_problems(installed, ["--speculative-adaptive"])[0].meant == ()
    assert near_miss_notes(["--context-lenght", "32768", "--cuda-graph-bs", "1", "2", "--enable-hierarchical-cache"]) \
        == ("`--context-lenght` is close to `--context-length`: if that was meant, this budget is without it",)


def test_the_flag_script_reads_sglangs_own_parser_with_no_gpu_visible(tmp_path):
    """argv.sglang_flags run as the container would run it, on a stand-in `sglang.srt.server_args` that logs while
    importing and refuses to load where a GPU is visible (importing must not open a CUDA context on a GPU the
    pre-flight is checking)."""
    import os
    import subprocess
    import sys

    from bot.core.argv import sglang_flags

    package = tmp_path / "sglang" / "srt"
    package.mkdir(parents=True)
    (tmp_path / "sglang" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "server_args.py").write_text(
        "import os\n"
        "print('INFO importing the stand-in')\n"
        "assert os.environ.get('CUDA_VISIBLE_DEVICES') == '', 'a GPU is visible'\n"
        "class ServerArgs:\n"
        "    @staticmethod\n"
        "    def add_cli_args(parser):\n"
        "        parser.add_argument('--tp-size', '--tp', type=int)\n"
        "        parser.add_argument('--enable-torch-compile', action='store_true')\n")
    argv = sglang_flags(sys.executable)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "CUDA_VISIBLE_DEVICES": "0,1"}
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    installed = parse_installed_flags(out.stdout)
    assert installed.options == {"-h": False, "--help": False, "--tp-size": True, "--tp": True,
                                 "--enable-torch-compile": False}


def test_environment_words_open_a_launch_and_only_the_families_that_configure_sglang_may_be_set():
    """NAME=VALUE words before the first flag are the launch's environment (a value after a flag is its value);
    loader and interpreter variables, and CUDA_VISIBLE_DEVICES (the pre-flight checks the GPUs the flags name), are
    refused; a secret one is redacted wherever the words are shown."""
    import pytest

    from bot.core.attempts import changes_between
    from bot.core.flags import env_words, launch_env, parse_sglang_flags, redacted, with_env
    from bot.errors import UsageError

    argv = ("SGLANG_ENABLE_SPEC_V2=1", "NCCL_P2P_DISABLE=1", "HF_TOKEN=hf_x", "no_proxy=127.0.0.1,localhost",
            "--tp", "2", "--json-model-override-args", "A=1")
    assert env_words(argv) == 4 and launch_env(argv) == argv[:4]
    flags = parse_sglang_flags(argv)
    assert flags.env == argv[:4] and flags.tp == 2 and flags.env_set("SGLANG_ENABLE_SPEC_V2")
    assert not flags.env_set("NCCL_SHM_DISABLE")
    assert redacted(argv)[2] == "HF_TOKEN=<redacted>" and redacted(argv)[:2] == argv[:2]
    assert redacted(("TOKENIZERS_PARALLELISM=false", "HF_HUB_TOKEN=x", "--tp", "2")) == (
        "TOKENIZERS_PARALLELISM=false", "HF_HUB_TOKEN=<redacted>", "--tp", "2")
    assert with_env(argv, "NCCL_P2P_DISABLE=0")[:4] == ("SGLANG_ENABLE_SPEC_V2=1", "HF_TOKEN=hf_x",
                                                        "no_proxy=127.0.0.1,localhost", "NCCL_P2P_DISABLE=0")
    for word in ("LD_PRELOAD=/tmp/x.so", "PYTHONPATH=/tmp", "PATH=/tmp", "BASH_ENV=/tmp/x", "CUDA_VISIBLE_DEVICES=1"):
        with pytest.raises(UsageError, match=word.split("=")[0]):
            parse_sglang_flags((word, "--tp", "2"))
    with pytest.raises(UsageError, match="--base-gpu-id"):
        launch_env(("CUDA_VISIBLE_DEVICES=2,3",))
    with pytest.raises(UsageError, match="unexpected argument"):
        parse_sglang_flags(("--tp", "2", "x"))  # not a word of the head
    assert changes_between(("NCCL_P2P_DISABLE=1", "HF_TOKEN=a", "--tp", "2"),
                           ("NCCL_P2P_DISABLE=0", "SGLANG_ENABLE_SPEC_V2=1", "HF_TOKEN=b", "--tp", "2")) == (
        "NCCL_P2P_DISABLE=1 -> 0", "+ SGLANG_ENABLE_SPEC_V2=1")


def test_the_env_script_lists_the_names_sglangs_own_source_mentions_without_importing_it(tmp_path):
    """argv.sglang_env_names run as the container would run it: the SGLANG_*/SGL_* names in the package's Python
    source (a definition, a getenv), found without importing it (the stand-in refuses to import); none outside its
    .py files; null where no SGLang is installed."""
    import os
    import subprocess
    import sys

    from bot.core.argv import sglang_env_names

    package = tmp_path / "site" / "sglang"
    (package / "srt").mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('imported')\n")
    (package / "srt" / "environ.py").write_text("class Envs:\n    SGLANG_MAMBA_CONV_DTYPE = EnvStr('bfloat16')\n")
    (package / "srt" / "jit.py").write_text("import os\nUSE = os.getenv('SGL_ENABLE_JIT_DEEPGEMM', '1')\n")
    (package / "README.md").write_text("SGLANG_ONLY_IN_DOCS=1\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    out = subprocess.run(sglang_env_names(sys.executable), capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert parse_env_names(out.stdout) == {"SGLANG_MAMBA_CONV_DTYPE", "SGL_ENABLE_JIT_DEEPGEMM"}
    bare = subprocess.run(sglang_env_names(sys.executable), capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert parse_env_names(bare.stdout) is None
    with pytest.raises(ValueError):
        parse_env_names("Traceback (most recent call last):\n")
    with pytest.raises(ValueError):
        parse_env_names(SGLANG_ENV_MARK + '{"SGLANG_X": 1}')


def test_an_sglang_variable_its_source_never_mentions_is_named_with_the_one_it_likely_meant():
    known = frozenset({"SGLANG_MAMBA_CONV_DTYPE", "SGLANG_MAMBA_SSM_DTYPE", "SGLANG_ENABLE_SPEC_V2"})
    env = ("SGLANG_MAMBA_CONV_DTPYE=float16", "NCCL_P2P_DISABLE=1", "SGLANG_ENABLE_SPEC_V2=1", "SGLANG_NO_SUCH=1")
    typo, unknown = unread_env(env, known)
    assert (typo.name, typo.meant) == ("SGLANG_MAMBA_CONV_DTPYE", ("SGLANG_MAMBA_CONV_DTYPE",))
    assert typo.describe("SGLang 0.5.9") == ("SGLang 0.5.9 never mentions `SGLANG_MAMBA_CONV_DTPYE` (did you mean "
                                             "`SGLANG_MAMBA_CONV_DTYPE`?): it would be ignored")
    assert (unknown.name, unknown.meant) == ("SGLANG_NO_SUCH", ())
    # other families are read by other code (NCCL, CUDA, torch): not judged against SGLang's source
    assert unread_env(("NCCL_P2P_DISABLE=1", "SGLANG_ENABLE_SPEC_V2=1"), known) == ()

