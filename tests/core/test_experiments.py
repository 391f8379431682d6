"""Flag experiments for findings that are not about memory, on real launch commands (failure corpus)."""

import json
import shlex

from bot.core.diagnosis import diagnose
from bot.core.experiments import finding_experiments, label_experiments
from bot.core.flags import command_flags, launch_env, parse_sglang_flags, with_flag, without_flags
from tests.conftest import FIXTURES

CASES = {c["id"]: c for c in map(json.loads, (FIXTURES / "sglang-failures" / "cases.jsonl").read_text().splitlines())}


def launch_flags(case_id):
    return command_flags(shlex.split(CASES[case_id]["launch_command"]))


def test_gpus_without_peer_access_get_the_custom_all_reduce_switch():
    argv = launch_flags("sglang-4814")  # 2x RTX 4090, --tensor-parallel-size=2
    (experiment,) = label_experiments("gpu_p2p_unsupported", argv)
    assert experiment.change == "--disable-custom-all-reduce"
    assert experiment.argv == (*argv, "--disable-custom-all-reduce")
    assert label_experiments("gpu_p2p_unsupported", experiment.argv) == ()  # already made: nothing to offer


def test_an_attention_backend_the_gpu_rejects_is_dropped_and_nothing_else_changes():
    argv = launch_flags("sglang-28297")  # --attention-backend fa4 on B300
    (experiment,) = label_experiments("attention_backend_unsupported", argv)
    assert experiment.change == "drop --attention-backend"
    assert "fa4" not in experiment.argv and "--moe-runner-backend" in experiment.argv
    assert len(experiment.argv) == len(argv) - 2


def test_a_backend_sglang_chose_itself_is_replaced_by_the_portable_one():
    """sglang#24714: FlashInfer (SGLang's choice, no --attention-backend given) has no kernel for head_dim 106; the
    experiment names the portable Triton backend, where a launch that named its backend gets the drop instead."""
    line = next(row.split("\t")[1] for row in (FIXTURES / "other-logs" / "thread-first-cause-lines.tsv").read_text()
                .splitlines() if "Unsupported head_dim" in row)
    finding = diagnose(line)
    seed = ("--model-path", "/models/llama", "--tp", "1")
    (triton,) = finding_experiments(finding, seed)
    assert (triton.change, triton.argv) == ("--attention-backend triton", (*seed, "--attention-backend", "triton"))
    parse_sglang_flags(triton.argv)  # a launch gpuops reads (the flag passes through to SGLang)
    assert [e.change for e in finding_experiments(finding, (*seed, "--attention-backend", "flashinfer"))] == \
        ["drop --attention-backend"]


def test_a_top_k_left_none_gets_top_k_1_before_speculation_is_turned_off():
    """The TypeError of a top-k SGLang left None: the cheapest experiment names it (1, a chain of the steps given);
    a launch that named one gets only the experiment without speculative decoding."""
    block = (FIXTURES / "other-logs" / "spec-topk-none.txt").read_text().split("\n====\n")[0]
    finding = diagnose(block)
    argv = ("--model-path", "/models/Qwen3.6-27B", "--tp", "2", "--speculative-algorithm", "NEXTN",
            "--speculative-num-steps", "3", "--speculative-num-draft-tokens", "4")
    first, off = finding_experiments(finding, argv)
    assert (first.change, first.argv) == ("--speculative-eagle-topk 1", (*argv, "--speculative-eagle-topk", "1"))
    assert parse_sglang_flags(first.argv).speculative_eagle_topk == 1
    assert off.argv == argv[:4]
    assert [e.argv for e in finding_experiments(finding, first.argv)] == [argv[:4]]


def test_a_conv_state_dtype_mismatch_sets_the_variable_to_the_dtype_the_error_names():
    """sglang#31719: the conv state in the model's dtype (the source the error names), an environment word before the
    flags, not the radix-cache switch of the state pool's other failures; made, it decides the hypothesis."""
    from bot.core.experiments import made_experiment

    finding = diagnose((FIXTURES / "other-logs" / "conv-state-dtype.txt").read_text())
    argv = ("NCCL_P2P_DISABLE=1", "--model-path", "/models/Qwen3.6-27B", "--tp", "2", "--dtype", "float16")
    (experiment,) = finding_experiments(finding, argv)
    assert experiment.change == "SGLANG_MAMBA_CONV_DTYPE=float16"
    assert experiment.argv == ("NCCL_P2P_DISABLE=1", "SGLANG_MAMBA_CONV_DTYPE=float16", *argv[1:])
    assert launch_env(experiment.argv) == ("NCCL_P2P_DISABLE=1", "SGLANG_MAMBA_CONV_DTYPE=float16")
    assert finding_experiments(finding, experiment.argv) == ()  # already set: nothing to offer
    assert made_experiment("mamba_cache_error", ["+ SGLANG_MAMBA_CONV_DTYPE=float16"]) == \
        "+ SGLANG_MAMBA_CONV_DTYPE=float16"
    # causal_conv1d's words name no dtype; its reports are float16 models
    line = next(row.split("\t")[1] for row in (FIXTURES / "other-logs" / "thread-first-cause-lines.tsv").read_text()
                .splitlines() if "conv_states_.scalar_type" in row)
    assert [e.change for e in finding_experiments(diagnose(line), argv)] == ["SGLANG_MAMBA_CONV_DTYPE=float16"]
    # the state pool's other failures keep their experiment
    assert [e.change for e in label_experiments("mamba_cache_error", argv, "MambaRadixCache")] == \
        ["--disable-radix-cache"]


def test_every_experiment_on_a_corpus_launch_parses_and_changes_only_its_flag():
    made = 0
    for case_id, case in CASES.items():
        if not case.get("launch_command") or "--" not in case["launch_command"]:
            continue
        try:
            argv = launch_flags(case_id)
            parse_sglang_flags(argv)
        except Exception:
            continue  # a reporter's prose or elision: not a launch the bot would have made
        for label in ("gpu_p2p_unsupported", "cuda_graph_capture_error", "torch_compile_error",
                      "speculative_decoding_error", "mamba_cache_error", "attention_backend_unsupported",
                      "quant_unsupported_on_gpu", "watchdog_timeout"):
            for experiment in label_experiments(label, argv):
                made += 1
                parse_sglang_flags(experiment.argv)
                assert experiment.argv != argv
                kept = [t for t in argv if t in experiment.argv]
                assert len(kept) >= len(argv) - 12, (case_id, label)
    assert made > 10


def test_turning_features_off_to_confirm_them():
    seed = ("--tp", "2", "--enable-torch-compile", "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4", "--mem-fraction-static", "0.85")
    (compile_off,) = label_experiments("torch_compile_error", seed)
    assert compile_off.argv == without_flags(seed, "--enable-torch-compile")
    (spec_off,) = label_experiments("speculative_decoding_error", seed)
    assert spec_off.argv == ("--tp", "2", "--enable-torch-compile", "--mem-fraction-static", "0.85")
    (graphs_off,) = label_experiments("cuda_graph_capture_error", seed)
    assert graphs_off.argv[-1] == "--disable-cuda-graph"
    assert label_experiments("gpu_p2p_unsupported", ("--disable-custom-all-reduce",)) == ()  # already made


def test_setting_a_flag_never_eats_the_next_one_after_a_switch_sglang_does_not_model():
    argv = ("--disable-custom-all-reduce", "--mem-fraction-static", "0.8")
    assert with_flag(argv, "--disable-custom-all-reduce", None) == ("--mem-fraction-static", "0.8",
                                                                      "--disable-custom-all-reduce")


def test_fp8_the_gpu_cannot_run_drops_the_online_quantization_or_the_fp8_kv_cache_whichever_was_asked():
    argv = launch_flags("sglang-13471")  # MiniMax-M2 at tp 4, no quantization flag: nothing to drop
    assert label_experiments("quant_unsupported_on_gpu", argv) == ()
    fp8_cache = with_flag(argv, "--kv-cache-dtype", "fp8_e4m3")
    (experiment,) = label_experiments("quant_unsupported_on_gpu", fp8_cache)
    assert experiment.change == "drop --kv-cache-dtype fp8_e4m3" and experiment.argv == argv
    assert label_experiments("quant_unsupported_on_gpu", with_flag(argv, "--kv-cache-dtype", "bf16")) == ()
    both = with_flag(fp8_cache, "--quantization", "fp8")
    assert [e.change for e in label_experiments("quant_unsupported_on_gpu", both)] == [
        "drop --quantization fp8", "drop --kv-cache-dtype fp8_e4m3"]


def test_a_checkpoint_that_ships_code_gets_the_trust_remote_code_switch_once():
    assert label_experiments("trust_remote_code_required", launch_flags("sglang-4814")) == ()  # it has the switch
    argv = launch_flags("sgl-docs-5")  # Llama-3-8B at tp 2, no switch
    (experiment,) = label_experiments("trust_remote_code_required", argv)
    assert experiment.change == "--trust-remote-code" and experiment.argv == (*argv, "--trust-remote-code")
    assert "read it first" in experiment.why
    assert label_experiments("trust_remote_code_required", experiment.argv) == ()


# the launch of tests/fixtures/other-logs/unrecognized-arguments.txt, as its source (devopsrustem/slurmv4 3/4.sh)
# gives it
SLURM_PREFILL = shlex.split(
    "--model-path /app/models/Deepseek-R1/ --trust-remote-code --tp-size 16 --host 10.99.91.39 --port 30000 "
    "--dist-init-addr 10.82.101.193:5000 --nnodes 2 --node-rank 0 --mem-fraction-static 0.8 "
    "--disaggregation-mode prefill --disaggregation-ib-device mlx5_0 --disaggregation-bootstrap-port 8998 "
    "--disaggregation-decode-url http://10.99.91.49:30001,http://10.99.91.33:30001")


def test_a_flag_outside_gpuops_table_is_dropped_with_all_its_values_as_the_parser_reads_them():
    # SGLang's list flag `--cuda-graph-bs 1 2 4 8` is not in gpuops' table: its values are every token up to the
    # next flag, for the parser and for without_flags alike
    argv = ("--tp", "2", "--cuda-graph-bs", "1", "2", "4", "8", "--mem-fraction-static", "0.85")
    assert parse_sglang_flags(argv).unknown == ("--cuda-graph-bs", "1", "2", "4", "8")
    assert without_flags(argv, "--cuda-graph-bs") == ("--tp", "2", "--mem-fraction-static", "0.85")
    assert with_flag(argv, "--cuda-graph-bs", "16")[-2:] == ("--cuda-graph-bs", "16")
    assert "4" not in with_flag(argv, "--cuda-graph-bs", "16")
    # a flag in the table keeps to its one value, whatever follows
    assert without_flags(("--mem-frac", "0.8", "--tp", "2"), "--mem-fraction-static") == ("--tp", "2")


def test_a_flag_sglangs_parser_refused_is_dropped_with_its_value_and_nothing_else():
    from bot.core.diagnosis import diagnose
    from bot.core.experiments import finding_experiments

    finding = diagnose((FIXTURES / "other-logs" / "unrecognized-arguments.txt").read_text())
    (drop,) = finding_experiments(finding, SLURM_PREFILL)  # nothing in gpuops' table is a typo away from it
    assert drop.change == "drop --disaggregation-decode-url http://10.99.91.49:30001,http://10.99.91.33:30001"
    assert drop.argv == tuple(SLURM_PREFILL[:-2])
    # the same refusal quoted for a launch that does not have the flag is not this launch's: nothing offered
    assert finding_experiments(finding, ["--tp", "2"]) == ()


def test_a_refused_typo_is_offered_corrected_first_then_dropped():
    from bot.core.experiments import argument_experiments

    argv = ("--tp", "2", "--context-lenght", "32768", "--cuda-graph-bs", "1", "2")
    line = "launch_server.py: error: unrecognized arguments: --context-lenght 32768"
    fixed, drop = argument_experiments(line, argv)
    assert fixed.change == "--context-length (not --context-lenght)"
    assert fixed.argv == ("--tp", "2", "--context-length", "32768", "--cuda-graph-bs", "1", "2")
    assert drop.change == "drop --context-lenght 32768" and drop.argv == ("--tp", "2", "--cuda-graph-bs", "1", "2")
    # argparse's other refusals (a bad value, an ambiguous abbreviation) name no flag to drop
    assert argument_experiments("launch_server.py: error: argument --tp-size: invalid int value: 'two'", argv) == ()


def test_the_flags_of_a_launch_command_start_after_sglangs_entry_point():
    """A `docker run` around the launch has flags of its own (sglang-6033's: --rm, --gpus, --ulimit): they are not
    SGLang's."""
    docker = shlex.split(CASES["sglang-6033"]["launch_command"].split(" ...")[0] + " lmsysorg/sglang:latest python3 "
                         "-m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8 --trust-remote-code")
    assert command_flags(docker) == ("--model-path", "deepseek-ai/DeepSeek-V3", "--tp", "8", "--trust-remote-code")
    assert command_flags(shlex.split("sglang serve Qwen/Qwen3-8B --tp 2")) == ("--tp", "2")
    assert command_flags(shlex.split("/opt/venv/bin/sglang serve --model-path m --tp 2")) == ("--model-path", "m",
                                                                                             "--tp", "2")
    assert command_flags(["--tp", "2"]) == ("--tp", "2")
    assert command_flags(shlex.split("python -m sglang.launch_server --port 30000")) == ("--port", "30000")


def test_the_environment_a_launch_command_gives_the_server_comes_first_in_its_flags():
    """sglang-23769 sets three SGLANG_* variables before `sglang serve`; env's and docker's -e/--env words count too,
    one per name (the last); a variable a launch may not set (CUDA_VISIBLE_DEVICES, LD_PRELOAD) and docker's other
    options are not the server's."""
    prefixed = command_flags(shlex.split(CASES["sglang-23769"]["launch_command"]))
    assert prefixed[:3] == ("SGLANG_DSV4_FP4_EXPERTS=0", "SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK=128",
                            "SGLANG_JIT_DEEPGEMM_PRECOMPILE=0") and prefixed[3].startswith("--")
    assert launch_env(prefixed) == prefixed[:3]  # words a launch may set (its other flags hold placeholders)
    assert command_flags(shlex.split("env NCCL_DEBUG=INFO CUDA_VISIBLE_DEVICES=0,1 NCCL_DEBUG=WARN LD_PRELOAD=/x.so "
                                     "python3 -m sglang.launch_server --tp 2")) == ("NCCL_DEBUG=WARN", "--tp", "2")
    docker = shlex.split("docker run --gpus all -e NCCL_P2P_DISABLE=1 --env=HF_HUB_OFFLINE=1 -v a=b:/c "
                         "lmsysorg/sglang python3 -m sglang.launch_server --tp 2 --model-path m")
    assert command_flags(docker) == ("NCCL_P2P_DISABLE=1", "HF_HUB_OFFLINE=1", "--tp", "2", "--model-path", "m")
    # a script's exports (sglang-3685: NCCL's network and the gloo interface; CUDA_VISIBLE_DEVICES and a lower-case
    # shell variable are not a launch's, sglang-467), and a plain assignment after a `;` is not exported
    exported = command_flags(shlex.split(CASES["sglang-3685"]["launch_command"]))
    assert exported[:5] == ("NCCL_NET=IB", "NCCL_SOCKET_IFNAME=bond1", "GLOO_SOCKET_IFNAME=bond1", "NCCL_DEBUG=INFO",
                            "--model-path")
    assert command_flags(shlex.split(CASES["sglang-467"]["launch_command"]))[0] == "--model-path"
    assert command_flags(shlex.split("export NCCL_DEBUG=INFO NCCL_SHM_DISABLE=1; NCCL_P2P_DISABLE=1; "
                                     "python -m sglang.launch_server --tp 2")) == (
        "NCCL_DEBUG=INFO", "NCCL_SHM_DISABLE=1", "--tp", "2")
    # after the entry point, a NAME=VALUE is a flag's value, not the environment
    assert command_flags(shlex.split("python -m sglang.launch_server --json-model-override-args A=1")) == (
        "--json-model-override-args", "A=1")


def test_an_nccl_failure_gets_a_launch_with_one_transport_off_and_a_shared_memory_error_only_that_transport():
    case = CASES["sgl-docs-5"]  # "Error while creating shared memory segment /dev/shm/nccl-..." on --tp 2
    argv = launch_flags("sgl-docs-5")
    finding = diagnose(case["log_excerpt"])
    assert finding.label == "nccl_error"
    (shm_off,) = finding_experiments(finding, argv)
    assert shm_off.change == "NCCL_SHM_DISABLE=1" and shm_off.argv == ("NCCL_SHM_DISABLE=1", *argv)
    assert parse_sglang_flags(shm_off.argv).env == ("NCCL_SHM_DISABLE=1",)
    # "unhandled system error" from ncclCommInitRank names no transport: NCCL's own log first, as its error asks,
    # then peer to peer off, then shared memory off
    generic = diagnose(CASES["sglang-4289"]["log_excerpt"])
    assert generic.label == "nccl_error" and "NCCL_DEBUG=INFO for details" in generic.evidence[-1].text
    changes = [e.change for e in finding_experiments(generic, argv)]
    assert changes == ["NCCL_DEBUG=INFO", "NCCL_P2P_DISABLE=1", "NCCL_SHM_DISABLE=1"]
    # a launch that already turned P2P off with NCCL's log on is offered only what it has not tried; earlier words
    # stay first
    tried = finding_experiments(generic, ("NCCL_P2P_DISABLE=1", "NCCL_DEBUG=INFO", *argv))
    assert [e.argv[:3] for e in tried] == [("NCCL_P2P_DISABLE=1", "NCCL_DEBUG=INFO", "NCCL_SHM_DISABLE=1")]
    # a word set to another value is replaced, not doubled
    (_, p2p, _) = finding_experiments(generic, ("NCCL_P2P_DISABLE=0", *argv))
    assert p2p.argv == ("NCCL_P2P_DISABLE=1", *argv)
    # a log with NCCL's own WARN lines already says which transport: no relaunch for the log
    no_space = diagnose((FIXTURES / "other-logs" / "nccl-shm-no-space.txt").read_text())
    assert [e.change for e in finding_experiments(no_space, argv)] == ["NCCL_SHM_DISABLE=1"]


def test_the_relaunch_with_nccls_log_on_names_the_transport_for_the_next_triage():
    """The loop after `NCCL_DEBUG=INFO`: the same failure, its log now carrying NCCL's own INFO and WARN lines (real
    ones: a setup's channels, then a shared-memory segment it could not make), is read as that transport's failure,
    whose one experiment is the launch without it."""
    tried = ("NCCL_DEBUG=INFO", "--tp", "2")
    lines = CASES["sglang-4289"]["log_excerpt"].splitlines()
    info = (FIXTURES / "other-logs" / "nccl-info-setup.txt").read_text().splitlines()
    warn = (FIXTURES / "other-logs" / "nccl-shm-no-space.txt").read_text().splitlines()
    finding = diagnose("\n".join([*lines[:5], *info * 20, *warn, *lines[5:]]))
    assert finding.label == "nccl_error" and "/dev/shm" in finding.explanation
    (experiment,) = finding_experiments(finding, tried)
    assert experiment.argv == ("NCCL_DEBUG=INFO", "NCCL_SHM_DISABLE=1", "--tp", "2")


def test_an_nccl_error_whose_last_error_is_cuda_out_of_memory_gets_no_transport_experiment():
    finding = diagnose((FIXTURES / "other-logs" / "nccl-unhandled-cuda-oom.txt").read_text())
    assert finding.label == "nccl_error" and finding.evidence[-1].text == "[rank1]: Cuda failure 2 'out of memory'"
    assert finding.evidence[-1].line_no == 5  # the line that makes it memory is quoted with the others
    assert finding_experiments(finding, ("--tp", "2")) == ()  # its next step is memory: --mem-fraction-static


def test_a_piecewise_capture_failure_turns_that_runner_off_as_sglangs_message_says():
    """A real log: the piecewise runner failing while serving (SGLang logs its wrapper and its advice). The experiment
    is the launch without piecewise CUDA graphs, not without CUDA graphs; where the launch turned the runner on, the
    flag that did is dropped instead."""
    finding = diagnose((FIXTURES / "other-logs" / "piecewise-graph-failed.txt").read_text())
    assert finding.label == "cuda_graph_capture_error"
    seed = ("--model-path", "/models/q", "--tp", "1", "--attention-backend", "flashinfer")
    (off,) = finding_experiments(finding, seed)
    assert (off.change, off.argv) == ("--disable-piecewise-cuda-graph", (*seed, "--disable-piecewise-cuda-graph"))
    parse_sglang_flags(off.argv)
    for switch in ("--enforce-piecewise-cuda-graph", "--enable-piecewise-cuda-graph"):
        (dropped,) = finding_experiments(finding, (*seed, switch))
        assert (dropped.change, dropped.argv) == (f"drop {switch}", seed)
    assert finding_experiments(finding, (*seed, "--disable-piecewise-cuda-graph")) == ()  # already made
    # a kernel fault the runner quotes (sglang#24714): the same experiment, under the fault's own label
    fault = diagnose(next(row.split("\t")[1] for row in (FIXTURES / "other-logs" / "thread-first-cause-lines.tsv")
                          .read_text().splitlines() if "cudaErrorMisalignedAddress" in row))
    assert fault.label == "illegal_memory_access"
    assert [e.change for e in finding_experiments(fault, seed)] == ["--disable-piecewise-cuda-graph"]
    # any other capture failure (sglang-6033, on H200: a random-seed call inside the capture): CUDA graphs off
    other = diagnose(CASES["sglang-6033"]["log_excerpt"])
    assert other.label == "cuda_graph_capture_error"
    assert [e.change for e in finding_experiments(other, seed)] == ["--disable-cuda-graph"]
