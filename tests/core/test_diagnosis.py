"""Triage rules over the real failure corpus and its traps (real lines only, re-ordered or cut)."""

import json
from dataclasses import replace

import pytest

from bot.core.diagnosis import NOT_A_CAUSE, STILL_STARTING, STOPPED_ON_REQUEST, LaunchContext, cause_line, diagnose
from bot.core.startup_log import Progress, advance
from tests.conftest import FIXTURES

CASES = [json.loads(line) for line in (FIXTURES / "sglang-failures/cases.jsonl").read_text().splitlines() if line]
BY_ID = {c["id"]: c for c in CASES}
# the log alone does not show this case's cause (a generic tensor-shape error; the speculative
# path is named only in the thread, and the case records no launch command)
KNOWN_MISSES = {"sglang-29516"}


def triage(case):
    return diagnose(case["log_excerpt"], context=LaunchContext.from_argv([case.get("launch_command") or ""]))


@pytest.mark.parametrize("case", [
    pytest.param(c, marks=pytest.mark.xfail(strict=True, reason="cause not visible in the log text"))
    if c["id"] in KNOWN_MISSES else c
    for c in CASES if c["quality"] in ("full", "error_line")], ids=lambda c: c["id"])
def test_full_and_error_line_cases_name_the_first_cause(case):
    finding = triage(case)
    assert finding.label == case["label"], [e.text for e in finding.evidence]
    assert finding.evidence and all(e.line_no >= 1 for e in finding.evidence)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["id"])
def test_no_secondary_label_is_ever_named_as_the_cause(case):
    assert triage(case).label not in (case.get("secondary_labels") or [])


def test_evidence_line_numbers_point_at_the_proving_line():
    case = BY_ID["sglang-4289"]
    finding = triage(case)
    lines = case["log_excerpt"].split("\n")
    for ev in finding.evidence:
        assert lines[ev.line_no - 1].strip()[:100] == ev.text[:100]
    assert "child_process_died" in finding.also_seen  # the echo is seen, and not named


def test_echo_before_the_traceback_is_still_an_echo():
    lines = BY_ID["sglang-4289"]["log_excerpt"].split("\n")
    echo = [x for x in lines if "sigquit" in x]
    reordered = "\n".join(echo + [x for x in lines if "sigquit" not in x])
    assert diagnose(reordered).label == "nccl_error"


def test_echo_alone_is_named_with_low_confidence():
    finding = triage(BY_ID["sglang-3685"])
    assert finding.label == "child_process_died" and finding.confidence == "low"


def test_newest_first_export_is_read_in_time_order():
    case = next(c for c in CASES if c["label"] == "kv_pool_oom" and c["quality"] == "full")
    lines = case["log_excerpt"].split("\n")
    finding = diagnose("\n".join(reversed(lines)))
    assert finding.label == "kv_pool_oom"


def test_cut_mid_line_tail_still_reads():
    case = BY_ID["sglang-8974"]  # ends mid-line: "It usually means the chi"
    assert case["log_excerpt"].rstrip().endswith("chi")
    assert triage(case).label == "nccl_error"


def test_cut_traceback_with_only_frames_is_unknown_not_a_guess():
    finding = triage(BY_ID["sglang-8336"])  # MTP frames, the CUDA error line beyond the excerpt
    assert finding.label == "unknown" and "speculative_decoding_error" in finding.also_seen


def test_a_log_that_stops_is_diagnosed_from_where_it_stopped():
    startup = json.loads((FIXTURES / "sglang-startup/cases.jsonl").read_text().splitlines()[0])  # real lines
    lines = [x for x in startup["log_excerpt"] if "Capture cuda graph end" not in x and "max_total" not in x
             and "fired up" not in x]
    finding = diagnose("\n".join(lines), stalled_minutes=12)
    assert finding.label == "cuda_graph_capture_error"
    assert finding.explanation == "no output for 12 minutes after CUDA graph capture began - a hang at capture"


def test_a_silence_shorter_than_a_hang_is_a_launch_still_starting_or_stopped_on_request_not_a_hang():
    """The same real log cut at CUDA graph capture: silent for less than the follower's stall timeout it is no hang,
    whether its server still runs or a person stopped it then; silent for longer it is, stop or not. Without the
    follower's timeout (a log file read in a terminal) any silence reads as before."""
    startup = json.loads((FIXTURES / "sglang-startup/cases.jsonl").read_text().splitlines()[0])
    lines = [x for x in startup["log_excerpt"] if "Capture cuda graph end" not in x and "max_total" not in x
             and "fired up" not in x]
    text = "\n".join(lines)
    capture = next(i for i, x in enumerate(lines) if "Capture cuda graph begin" in x) + 1
    follower = LaunchContext(hang_after_minutes=10)
    starting = diagnose(text, stalled_minutes=0.5, context=follower)
    assert (starting.label, starting.phase) == (STILL_STARTING, "startup: CUDA graphs")
    assert starting.explanation.startswith("still starting: its last line, 30 s ago, came after CUDA graph capture "
                                           "began; nothing in the log names a failure so far")
    assert "10 min without output is one" in starting.explanation and "hang at capture" not in starting.explanation
    assert [e.line_no for e in starting.evidence] == [capture]
    stopped = diagnose(text, stalled_minutes=0.2, context=replace(follower, stopped_on_request=True))
    assert stopped.label == STOPPED_ON_REQUEST
    assert stopped.explanation.startswith("stopped on request 12 s after its last line, after CUDA graph capture "
                                          "began: nothing in the log names a failure before the stop")
    hung_then_stopped = diagnose(text, stalled_minutes=12, context=replace(follower, stopped_on_request=True))
    assert hung_then_stopped.label == "cuda_graph_capture_error"
    assert hung_then_stopped.explanation == ("no output for 12 minutes after CUDA graph capture began - a hang at "
                                             "capture; then it was stopped on request")
    assert diagnose(text, stalled_minutes=0.5).label == "cuda_graph_capture_error"  # no follower's timeout given
    # neither names a first cause: no hypothesis is proposed from them, no cause line replaces the log's own
    assert {STILL_STARTING, STOPPED_ON_REQUEST} <= NOT_A_CAUSE and cause_line(starting) is None


def test_context_decides_generic_symptoms():
    case = BY_ID["sglang-pr9388"]
    assert diagnose(case["log_excerpt"]).label == "device_side_assert"
    assert triage(case).label == "speculative_decoding_error"


def test_unknown_quotes_the_most_telling_lines():
    finding = diagnose("starting up\nloading things\nsomething odd: Failed to frobnicate the widget\n")
    assert finding.label == "unknown" and "Failed to frobnicate" in finding.evidence[-1].text


def test_nccl_unhandled_cuda_error_whose_last_error_is_oom_says_so():
    text = (FIXTURES / "other-logs" / "nccl-unhandled-cuda-oom.txt").read_text()
    finding = diagnose(text)
    assert finding.label == "nccl_error" and finding.evidence[0].line_no == 2
    assert "out-of-memory" in finding.explanation and "--mem-fraction-static" in finding.next_step
    without_oom = "\n".join(x for x in text.splitlines() if "out of memory" not in x)
    assert "/dev/shm" in diagnose(without_oom).next_step  # the transport advice when it is not memory
    # an earlier CUDA fault stays the first cause; NCCL's unhandled CUDA error is its echo
    assert diagnose("RuntimeError: CUDA error: an illegal memory access was encountered\n" + text).label == \
        "illegal_memory_access"


def test_an_nccl_error_that_names_its_shared_memory_segment_says_so_and_points_at_dev_shm_alone():
    for text in ((FIXTURES / "other-logs" / "nccl-shm-extend.txt").read_text(),
                 (FIXTURES / "other-logs" / "nccl-shm-no-space.txt").read_text(),
                 next(c["log_excerpt"] for c in CASES if c["id"] == "sgl-docs-5")):
        finding = diagnose(text)
        assert finding.label == "nccl_error" and "shared-memory segment in /dev/shm" in finding.explanation
        assert "NCCL_SHM_DISABLE=1" in finding.next_step and "P2P" not in finding.next_step
    generic = diagnose(next(c["log_excerpt"] for c in CASES if c["id"] == "sglang-4289"))
    assert "NCCL_P2P_DISABLE=1" in generic.next_step  # no transport named: both stay on the table


@pytest.mark.parametrize("case", [c for c in CASES if c["quality"] in ("full", "error_line", "hang")],
                         ids=lambda c: c["id"])
def test_a_named_cause_is_placed_in_its_labelled_phase(case):
    finding = diagnose(case["log_excerpt"], context=LaunchContext.from_argv([case.get("launch_command") or ""]))
    if finding.label != case["label"]:
        pytest.skip("not named right (scored by the top-1 test)")
    assert finding.phase.split(":")[0] == case["phase"]


def test_the_phase_comes_from_where_the_log_is_not_from_the_rule():
    # real lines: a startup log's weight-load lines, then a real failure's error line after them
    startup = json.loads((FIXTURES / "sglang-startup/cases.jsonl").read_text().splitlines()[3])["log_excerpt"]
    begin = next(x for x in startup if "Load weight begin" in x)
    end = next(x for x in startup if "Load weight end" in x)
    oom = next(c for c in CASES if c["label"] == "kv_pool_oom" and c["quality"] == "error_line")["log_excerpt"]
    assert diagnose("\n".join([begin, end, oom])).phase == "startup: KV pool"
    assert diagnose("\n".join([begin, oom])).phase == "startup: weights"
    assert diagnose(oom).phase == "startup"  # no markers: the rule's own phase
    decode_oom = next(c for c in CASES if c["label"] == "runtime_oom" and c["quality"] == "error_line")
    served = next(x for x in json.loads((FIXTURES / "sglang-startup/cases.jsonl").read_text().splitlines()[0])[
        "log_excerpt"] if "The server is fired up" in x)
    assert diagnose(served + "\n" + decode_oom["log_excerpt"]).phase == "runtime"


def test_torch_nccl_error_line_in_every_torch_generation():
    for line in (FIXTURES / "other-logs" / "torch-nccl-error-in.txt").read_text().splitlines():
        finding = diagnose(line)
        assert finding.label == "nccl_error", line


def test_hub_rate_limit_and_compiler_failures_in_their_library_wording():
    hub = diagnose((FIXTURES / "other-logs" / "hf-hub-429-client-error.txt").read_text())
    assert (hub.label, hub.evidence[0].line_no) == ("hf_download_error", 1)
    compiled = diagnose((FIXTURES / "other-logs" / "inductor-no-triton.txt").read_text())
    assert (compiled.label, compiled.evidence[0].line_no) == ("torch_compile_error", 2)
    assert "--enable-torch-compile" in compiled.next_step
    # the same compiler failure wrapping a CUDA OOM says it is memory (the OOM line is the weight-load one of
    # a real corpus case)
    oom_line = next(x for c in CASES if c["label"] == "weight_load_oom" for x in c["log_excerpt"].splitlines()
                    if "CUDA out of memory" in x)
    text = (FIXTURES / "other-logs" / "inductor-no-triton.txt").read_text().splitlines()
    wrapped = diagnose("\n".join([*text[:2], oom_line]))
    assert wrapped.label == "torch_compile_error" and "out of GPU memory" in wrapped.explanation


def test_dimensions_and_quantized_weights_that_do_not_split_over_tp_are_a_tp_divisibility_error():
    logs = ("awq-input-not-aligned.txt", "tp-not-divisible.txt", "fp8-block-not-divisible.txt")
    for line in (x for name in logs for x in (FIXTURES / "other-logs" / name).read_text().splitlines()):
        finding = diagnose(line)
        assert (finding.label, finding.phase) == ("tp_divisibility_error", "startup"), line
    # Kimi-Linear's KDA layers raise their own ValueError (SGLang models/kimi_linear.py, the message it formats)
    kda = diagnose("ValueError: KDA num_heads (32) must be divisible by global tp_size (3)")
    assert (kda.label, kda.phase) == ("tp_divisibility_error", "startup")


def test_no_sglang_class_and_no_usable_transformers_class_is_an_unsupported_architecture():
    # SGLang's model loader (resolve_transformers_arch) in its two wordings; its fallback warning is not a failure
    for line in ("ValueError: Qwen3_5ForCausalLM has no SGlang implementation and the Transformers implementation "
                 "is not compatible with SGLang.",
                 "ValueError: The Transformers implementation of MiniCPMForCausalLM is not compatible with SGLang."):
        finding = diagnose(line)
        assert (finding.label, finding.confidence) == ("unsupported_architecture", "high")
    warning = ("[2026-07-13] DeepseekV4ForCausalLM has no SGLang implementation, falling back to Transformers "
               "implementation. Some features may not be supported and performance may not be optimal.")
    assert diagnose(warning).label != "unsupported_architecture"


def test_a_transformers_that_rejects_the_configs_rope_scaling_is_too_old():
    # transformers' own check (LlamaConfig._rope_scaling_validation before 4.43), met loading Llama 3.1 in SGLang
    # 0.1.14 (ayushnangia16/nvidia-sglang-docker's test notes)
    finding = diagnose("ValueError: `rope_scaling` must be a dictionary with two fields, `type` and `factor`, got "
                       "{'factor': 8.0, 'low_freq_factor': 1.0, 'high_freq_factor': 4.0, "
                       "'original_max_position_embeddings': 8192, 'rope_type': 'llama3'}")
    assert (finding.label, finding.confidence) == ("transformers_too_old", "high")
    assert "4.43" in finding.next_step


def test_cuda_error_out_of_memory_wording_is_an_oom_too():
    # torch's wording when the allocation fails inside a CUDA call, as quoted from a real training run's stdout
    assert diagnose("RuntimeError: CUDA error: out of memory").label == "weight_load_oom"


def test_an_oom_that_the_capture_wrapper_re_raises_is_the_capture_oom_even_without_its_frames():
    """A log handed over from its tail (`docker logs --tail`) can start below the frames that show the capture: the
    out-of-memory is then known as the capture's by the wrapper that quotes the same allocation further down, and
    is not named as a weight-load OOM beside it. Python prints the inner exception, then the wrapper's traceback
    (the real sglang-5285 excerpt) after "During handling of the above exception"."""
    case = next(c for c in CASES if c["id"] == "sglang-5285")
    wrapper = case["log_excerpt"].split("\n")

    def chained(size):
        return [f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {size}. GPU 7 has a total capacity "
                "of 95.00 GiB", "", "During handling of the above exception, another exception occurred:", "",
                *wrapper]

    same = diagnose("\n".join(chained("448.00 MiB")))
    assert (same.label, same.phase, same.also_seen) == ("cuda_graph_oom", "startup: CUDA graphs", ())
    assert [e.line_no for e in same.evidence] == [1, 22]
    # a different allocation is another failure (a restart's): it keeps its own reading
    other = diagnose("\n".join(chained("2.00 GiB")))
    assert other.label == "cuda_graph_oom" and other.also_seen == ("weight_load_oom",)


def test_a_bare_keyerror_naming_the_checkpoints_model_type_is_transformers_too_old():
    case = next(c for c in CASES if c["id"] == "xinference-3471")  # real: KeyError: 'qwen3_moe'
    lines = case["log_excerpt"].splitlines()
    bare = "\n".join(x for x in lines if "CONFIG_MAPPING" not in x)  # the frame that names the lookup is cut away
    assert diagnose(bare).label != "transformers_too_old"  # alone, a KeyError proves nothing
    known = diagnose(bare, context=LaunchContext.from_argv([], ("qwen3_moe",)))
    assert known.label == "transformers_too_old" and "'qwen3_moe'" in known.explanation
    other = diagnose(bare, context=LaunchContext.from_argv([], ("llama",)))
    assert other.label != "transformers_too_old"


def test_a_log_that_stops_with_the_token_pool_nearly_full_is_read_as_running_out():
    # two real partial cases: decode (0.94) and prefill (0.92 -> 0.95) batches, then the text stops
    by_id = {c["id"]: c for c in CASES}
    for cid, usage in (("sglang-14972", "94%"), ("sglang-7353", "95%")):
        finding = diagnose(by_id[cid]["log_excerpt"])
        assert (finding.label, finding.confidence, finding.phase) == ("runtime_oom", "low", "runtime"), cid
        assert f"token pool {usage} full" in finding.explanation and "inferred" in finding.explanation
    # a log that stops after a weight load leaving almost nothing: the general KV-budget words, inferred (the
    # narrower kv_pool_oom rules, such as a sliding-window pool's refusal, are not what this log says)
    stopped = diagnose(by_id["sglang-4895"]["log_excerpt"])
    assert stopped.label == "kv_pool_oom" and stopped.explanation.startswith(
        "after the weights, the static memory budget left nothing for the KV cache pool (inferred:")
    # a server at an empty pool when its log stops is not out of memory (a real startup log's last batch line)
    startup = [json.loads(x) for x in (FIXTURES / "sglang-startup/cases.jsonl").read_text().splitlines() if x]
    idle = next(x for c in startup for x in c["log_excerpt"] if "token usage: 0.00" in x)
    assert diagnose(idle).label != "runtime_oom"


def test_hybrid_state_pool_errors_are_a_memory_budget_or_a_refused_configuration():
    lines = (FIXTURES / "other-logs" / "hybrid-state-errors.txt").read_text().splitlines()
    # no room for the state pool (E3) or too few slots for one request (E4): the static budget, as for the KV pool
    assert diagnose(lines[0]).label == "kv_pool_oom"
    too_small = diagnose("\n".join(lines[1:3]))
    assert (too_small.label, too_small.phase) == ("kv_pool_oom", "startup")
    # the state pool's radix cache refusing the flags (E5, and a model without extra_buffer): configuration
    for line in lines[3:]:
        assert diagnose(line).label == "mamba_cache_error", line


def test_a_sliding_window_pool_too_small_to_admit_a_request_is_the_kv_budget():
    # SGLang's pool configurator's refusal, as its f-string formats it with the values of the repro in
    # sgl-project/sglang#37610 (DeepSeek-V4-Flash, --max-total-tokens 4096: int(4096 x 0.1) = 409 -> one 256 page)
    line = ("ValueError: SWA pool (256 tokens) cannot hold even one request: the prefill admission floor is "
            "sliding_window_size (128) + page_size (256). Increase --swa-full-tokens-ratio or the total KV budget.")
    found = diagnose(line)
    assert (found.label, found.confidence) == ("kv_pool_oom", "high") and "--swa-full-tokens-ratio" in found.next_step
    # under the sigquit its scheduler's death sends, it is still the cause
    echoed = diagnose(f"{line}\n[2026-09-02 10:00:03] Received sigquit from a child process. It usually means the "
                      "child failed.")
    assert echoed.label == "kv_pool_oom" and echoed.also_seen == ("child_process_died",)


def test_a_sliding_window_pool_cap_that_leaves_the_full_pool_nothing_is_the_kv_budget():
    # DeepSeek-V4's capped sliding-window pool refusing a launch, as a public run report quotes it (wrapped)
    found = diagnose((FIXTURES / "other-logs" / "swa-pool-cap.txt").read_text())
    assert (found.label, found.confidence) == ("kv_pool_oom", "high") and found.evidence[0].line_no == 1
    assert "--max-running-requests" in found.next_step


def test_a_gated_repository_and_a_checkpoint_that_is_not_whole_are_said_with_what_to_do():
    gated = diagnose((FIXTURES / "other-logs" / "gated-repo.txt").read_text())
    assert gated.label == "hf_download_error" and "gated" in gated.explanation and "HF_TOKEN" in gated.next_step
    assert gated.evidence[0].text == "OSError: You are trying to access a gated repo."
    lines = (FIXTURES / "other-logs" / "safetensors-header.txt").read_text().splitlines()
    for line in (lines[2], lines[4]):  # an LFS pointer's "header" read as a length; a file cut short
        cut = diagnose(line)
        assert (cut.label, cut.confidence) == ("hf_download_error", "high") and "git lfs pull" in cut.next_step
    # in the traceback a launcher reports it under, the line is the evidence
    assert diagnose("\n".join(lines[:4])).evidence[0].line_no == 3


def test_a_flash_attn_built_for_another_torch_or_run_before_ampere_is_named():
    abi, abi_cuda, arch = (FIXTURES / "other-logs" / "flash-attn-lines.txt").read_text().splitlines()
    for line in (abi, abi_cuda):  # c10 symbols the installed torch does not export
        found = diagnose(line)
        assert (found.label, found.phase) == ("kernel_package_mismatch", "import") and "torch" in found.explanation
    # sgl_kernel's own mismatch keeps its own words
    assert "sgl_kernel" in diagnose(abi.replace("flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so",
                                                "sgl_kernel/common_ops.abi3.so")).explanation
    assert diagnose(arch).label == "attention_backend_unsupported"


def test_sglangs_own_attention_backend_gates_are_named_with_the_flag_to_change():
    lines = (FIXTURES / "other-logs" / "attention-backend-gates.txt").read_text().splitlines()
    # TRT-LLM MHA off SM100 (the whole backend, and the prefill one), fa3 for a vision tower on Blackwell, the
    # backends a hybrid GDN model takes on Blackwell, sgl-kernel's flash-attn below its oldest build
    for line in lines:
        found = diagnose(line)
        assert (found.label, found.phase, found.confidence) == ("attention_backend_unsupported", "startup", "high"), \
            line
        assert "--prefill-/--decode-attention-backend" in found.next_step
    # the gate raised while the scheduler starts, with the parent's sigquit after it: the gate is the cause
    echoed = diagnose("\n".join([lines[3], "[2026-08-17 10:00:00] Received sigquit from a child process. It usually "
                                            "means the child failed."]))
    assert echoed.label == "attention_backend_unsupported" and "child_process_died" in echoed.also_seen


def test_sgl_kernels_loader_finding_no_build_it_can_load_is_a_kernel_package_mismatch():
    lines = (FIXTURES / "other-logs" / "sgl-kernel-load-failure.txt").read_text().splitlines()
    found = diagnose("\n".join(lines))
    assert (found.label, found.phase, found.confidence) == ("kernel_package_mismatch", "import", "high")
    assert "sgl-kernel" in found.next_step
    # the summary alone (the per-file reasons cut off) still names it
    assert diagnose("\n".join(lines[:7])).label == "kernel_package_mismatch"


def test_a_warmup_answered_by_a_proxy_names_the_proxy_not_the_server():
    lines = (FIXTURES / "other-logs" / "warmup-through-proxy.txt").read_text().splitlines()
    found = diagnose("\n".join(lines))
    assert (found.label, found.phase, found.confidence) == ("warmup_through_proxy", "startup", "high")
    assert found.evidence[0].line_no == 6 and "no_proxy" in found.next_step
    # a warmup the server itself failed (a 500 with its error) is not a proxy's answer
    failed = "AssertionError: res=<Response [500]>, res.text='Internal Server Error'"
    served = diagnose("\n".join([*lines[1:5], failed]))
    assert served.label != "warmup_through_proxy"


def test_a_user_space_driver_that_is_not_the_nodes_is_the_driver_family_with_the_container_fix():
    lines = (FIXTURES / "other-logs" / "cuda-803-lines.txt").read_text().splitlines()
    for text in ("\n".join(lines[:2]), lines[2]):  # torch's device count, and a CUDA call, failing with error 803
        found = diagnose(text)
        assert (found.label, found.confidence) == ("cuda_driver_too_old", "high") and "803" in found.explanation
        assert "--no-kernel-module" in found.next_step


def test_ptx_from_a_newer_toolkit_than_the_driver_is_a_driver_too_old():
    lines = (FIXTURES / "other-logs" / "ptx-toolchain-lines.txt").read_text().splitlines()
    for text in ("\n".join(lines[:2]), lines[2]):  # torch's form (and its search hint), a CUDA tool's
        found = diagnose(text)
        assert (found.label, found.confidence) == ("cuda_driver_too_old", "high") and "host driver" in \
            found.next_step


def test_a_failed_prefill_decode_hand_over_is_named_in_each_transfer_engines_words():
    lines = (FIXTURES / "other-logs" / "pd-transfer-lines.txt").read_text().splitlines()
    # Mooncake's TCP transport, SGLang's own words for the failed request, NIXL's agent and its status code
    for line in (lines[0], lines[2], lines[3], lines[5]):
        found = diagnose(line)
        assert (found.label, found.confidence, found.phase) == ("kv_transfer_error", "high", "runtime"), line
        assert "--disaggregation-transfer-backend" in found.next_step
    # a run of them: the first failing line is the evidence
    assert diagnose("\n".join(lines[:3])).evidence[0].line_no == 1


def test_a_gloo_pair_that_drops_or_never_connects_is_a_distributed_comm_error():
    # the mesh never forming, a read on a reset socket, and a closed peer quoted with a full-width colon
    for line in (FIXTURES / "other-logs" / "gloo-transport-lines.txt").read_text().splitlines():
        found = diagnose(line)
        assert (found.label, found.confidence) == ("distributed_comm_error", "high"), line
        assert "GLOO_SOCKET_IFNAME" in found.next_step


def test_custom_all_reduce_failing_on_its_ipc_buffers_is_the_p2p_family():
    peer, *invalid = (FIXTURES / "other-logs" / "custom-allreduce-ipc.txt").read_text().splitlines()
    assert (diagnose(peer).label, diagnose(peer).confidence) == ("gpu_p2p_unsupported", "high")
    for line in invalid:  # the kernel's CUDA check answering 'invalid argument' on its IPC handles
        found = diagnose(line)
        assert (found.label, found.phase) == ("gpu_p2p_unsupported", "startup"), line
        assert "IPC" in found.explanation and "--disable-custom-all-reduce" in found.next_step


def test_flashinfers_workspace_overflow_is_named_in_each_releases_words():
    lines = (FIXTURES / "other-logs" / "flashinfer-workspace-lines.txt").read_text().splitlines()
    # the newer "Buffer overflow when allocating memory for ..." (two quotings) and the oldest, misspelt form
    for line in lines[:3]:
        found = diagnose(line)
        assert (found.label, found.confidence) == ("flashinfer_workspace_oom", "high"), line
        assert "SGLANG_FLASHINFER_WORKSPACE_SIZE" in found.next_step and "not the GPU's memory" in found.explanation
    # the same error wrapped over three lines: its last line still names it
    assert diagnose("\n".join(lines[3:])).label == "flashinfer_workspace_oom"


def test_a_torch_built_without_this_gpus_capability_is_named_from_its_import_warning():
    lines = (FIXTURES / "other-logs" / "torch-arch-lines.txt").read_text().splitlines()
    # a Blackwell card under an older wheel: the warning, not the CUDA error after it, is the evidence; both named
    blackwell = diagnose("\n".join(lines[:3]))
    assert (blackwell.label, blackwell.confidence) == ("kernel_arch_unsupported", "high")
    assert blackwell.evidence[0].line_no == 1
    assert "the GPU is sm_120, the build supports sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90" in blackwell.explanation
    # an older card than the build's oldest, and the attention kernel's own check
    assert "the GPU is sm_61, the build supports sm_75" in diagnose("\n".join(lines[3:5])).explanation
    assert diagnose(lines[5]).label == "kernel_arch_unsupported"
    # the same warning ahead of an NCCL error it causes: the warning is the first cause
    assert diagnose("\n".join([*lines[:2], "RuntimeError: NCCL error: unhandled cuda error"])).label == \
        "kernel_arch_unsupported"


def test_the_scheduler_watchdog_is_named_in_newer_releases_words():
    lines = (FIXTURES / "other-logs" / "watchdog-newer-lines.txt").read_text().splitlines()
    found = diagnose("\n".join(lines))
    assert (found.label, found.confidence, found.evidence[0].line_no) == ("watchdog_timeout", "high", 1)
    # the py-spy dump of a stuck rank is the watchdog's own doing: with the timeout line cut off, it still names it
    assert diagnose("\n".join(lines[3:])).label == "watchdog_timeout"


def test_a_token_pool_that_is_full_while_serving_is_runtime_oom():
    lines = (FIXTURES / "other-logs" / "token-pool-full-lines.txt").read_text().splitlines()
    # decode cannot retract the last request: the pool does not hold even one
    assert (diagnose(lines[0]).label, diagnose(lines[0]).confidence) == ("runtime_oom", "high")
    # a log that stops in retractions (older and newer words): the pool was full, inferred, so low
    for tail in (lines[1:3], lines[3:6]):
        found = diagnose("\n".join(tail))
        assert (found.label, found.confidence, found.phase) == ("runtime_oom", "low", "runtime"), tail
        assert "full" in found.explanation
    # retractions followed by a real cause: the cause is named, not the pool
    nccl = diagnose("\n".join([*lines[3:6], "RuntimeError: NCCL error: unhandled system error"]))
    assert nccl.label == "nccl_error"


def test_an_architecture_refused_after_its_module_failed_to_import_points_at_the_import_error():
    text = (FIXTURES / "other-logs" / "unregistered-architecture.txt").read_text()
    skipped, fallback = text.strip().split("\n====\n")
    # DeepseekV3ForCausalLM lives in deepseek_v2.py, which the registry skipped (a Triton helper failed to build)
    found = diagnose(skipped)
    assert (found.label, found.confidence) == ("unsupported_architecture", "high")
    assert "skipped the model module deepseek_v2 because its import failed" in found.explanation
    assert "returned non-zero exit status 1." in found.explanation  # the reason's end, kept when it is cut
    assert [e.line_no for e in found.evidence] == [3, 1]
    assert found.next_step.startswith("fix the import error")
    # modules healthy logs skip (an older transformers lacks glm_ocr) are not blamed for another architecture
    notices = (FIXTURES / "other-logs" / "healthy-startup-notices.txt").read_text().splitlines()
    glm4 = diagnose("\n".join([*notices[:3], skipped.splitlines()[2].replace("DeepseekV3", "Glm4")]))
    assert glm4.label == "unsupported_architecture" and "skipped" not in glm4.explanation
    assert [e.line_no for e in glm4.evidence] == [4]
    # Transformers' fallback refusing a class SGLang did not register either
    assert (diagnose(fallback).label, diagnose(fallback).confidence) == ("unsupported_architecture", "high")


def test_cuda_failing_to_initialise_in_a_container_points_at_the_uvm_device():
    warning = (FIXTURES / "other-logs" / "cuda-init-unknown-error.txt").read_text()
    found = diagnose(warning)
    assert (found.label, found.confidence, found.phase) == ("cuda_driver_too_old", "medium", "startup")
    assert "/dev/nvidia-uvm" in found.explanation and "nvidia-uvm-tools" in found.next_step
    # torch then finds no GPU: the warning says why, so it leads
    none = (FIXTURES / "other-logs" / "no-usable-gpu.txt").read_text().splitlines()[0]
    both = diagnose(warning + none)
    assert both.label == "cuda_driver_too_old" and [e.line_no for e in both.evidence] == [1, 3]
    assert "/dev/nvidia-uvm" in both.explanation
    # a warning: an error naming another cause outranks it
    port = (FIXTURES / "other-logs" / "port-in-use-lines.txt").read_text().splitlines()[0]
    assert diagnose(warning + port).label == "port_in_use"


def test_triton_finding_no_memory_to_load_a_kernel_is_an_out_of_memory_of_its_phase():
    oom = (FIXTURES / "other-logs" / "triton-cuda-oom.txt").read_text().strip()
    assert diagnose(oom).label == "weight_load_oom"  # alone: an OOM, placed where OOMs without context go
    serving = (FIXTURES / "other-logs" / "token-pool-full-lines.txt").read_text().splitlines()[3]  # a decode batch
    assert diagnose(f"{serving}\n{oom}").label == "runtime_oom"
    startup = json.loads((FIXTURES / "sglang-startup" / "cases.jsonl").read_text().splitlines()[0])["log_excerpt"]
    lines = startup if isinstance(startup, list) else startup.splitlines()
    capture = next(line for line in lines if "Capture cuda graph begin" in line)
    assert diagnose(f"{capture}\n{oom}").label == "cuda_graph_oom"


def test_an_extension_built_for_a_newer_c_library_than_the_container_has_is_a_package_mismatch():
    glibc, glibc_so, glibcxx = (FIXTURES / "other-logs" / "glibc-too-old.txt").read_text().splitlines()
    for line in (glibc, glibc_so, glibcxx):
        found = diagnose(line)
        assert (found.label, found.confidence) == ("kernel_package_mismatch", "high"), line
    assert "GLIBC:" in diagnose(glibc).next_step and "conda" in diagnose(glibcxx).next_step
    # a library merely missing is another failure (the driver's own libraries are a driver problem)
    assert diagnose("ImportError: libcuda.so.1: cannot open shared object file: No such file or "
                    "directory").label == "cuda_driver_too_old"


def test_a_draft_that_cannot_take_the_target_s_embeddings_is_a_speculative_failure():
    # an EAGLE draft (or the target itself) built where an EAGLE3 draft was expected; a model class without the
    # embedding/lm_head sharing NEXTN needs
    for line in (FIXTURES / "other-logs" / "spec-draft-embed-sharing.txt").read_text().splitlines():
        found = diagnose(line)
        assert (found.label, found.confidence, found.phase) == ("speculative_decoding_error", "high", "startup")
        assert "--speculative-draft-model-path" in found.next_step
    # the same attribute missing from something else is no speculative failure
    assert diagnose("AttributeError: 'Qwen2ForCausalLM' object has no attribute 'set_embedder'").label == "unknown"


def test_a_top_k_left_none_where_sglang_settles_the_parameters_is_a_speculative_failure():
    """--speculative-num-steps without --speculative-eagle-topk: Python's TypeError under the statement of SGLang's
    that compares or multiplies the None (server_args' check, the tokenizer's reserved tokens). The same TypeError
    under another statement (sglang-4048: a request's max_new_tokens, the echo of a KV pool too small) is not it."""
    for block in (FIXTURES / "other-logs" / "spec-topk-none.txt").read_text().strip().split("\n====\n"):
        found = diagnose(block)
        assert (found.label, found.confidence, found.phase) == ("speculative_decoding_error", "high", "startup")
        assert found.evidence[0].text.startswith("TypeError: ") and "--speculative-eagle-topk 1" in found.next_step
    request = "    if self.sampling_params.max_new_tokens > 0:\n" \
              "TypeError: '>' not supported between instances of 'NoneType' and 'int'"
    assert diagnose(request).label == "unknown"


def test_the_hybrid_state_pool_failing_in_its_own_words_or_under_its_frames_is_mamba_cache_error():
    blocks = (FIXTURES / "other-logs" / "mamba-cache-lines.txt").read_text().strip().split("\n====\n")
    init, no_slot, sanity, *asserted = blocks
    # the scheduler's constructor building the mamba radix cache: start-up, while the pools are made
    found = diagnose(init)
    assert (found.label, found.phase) == ("mamba_cache_error", "startup: KV pool")
    # its own messages: no slot left to allocate, the radix tree's self-check
    for text in (no_slot, sanity):
        assert (diagnose(text).label, diagnose(text).confidence) == ("mamba_cache_error", "high"), text
    for text in asserted:
        # a bare assertion inside the state pool's bookkeeping: named from the frames, so with low confidence
        assert (diagnose(text).label, diagnose(text).confidence) == ("mamba_cache_error", "low"), text
        # cut before the exception line: the frames lead, the cause is not claimed
        cut = diagnose(text.rsplit("\n", 1)[0])
        assert cut.label == "unknown" and "mamba_cache_error" in cut.explanation, text
        # what the frames raise decides when it names a cause of its own
        raised = "RuntimeError: CUDA error: an illegal memory access was encountered"
        other = diagnose(text.rsplit("\n", 1)[0] + "\n" + raised)
        assert other.label == "illegal_memory_access"


def test_triton_refusing_a_kernel_config_is_named_even_when_the_text_stops_at_its_raise():
    frame, raise_line, error = (FIXTURES / "other-logs" / "triton-out-of-resources.txt").read_text().splitlines()
    for text in (error, "\n".join([frame, raise_line]), "\n".join([frame, raise_line, error])):
        assert diagnose(text).label == "triton_out_of_resources", text
    assert "not a memory problem" in diagnose(raise_line).explanation


def test_a_request_too_long_is_read_from_the_api_error_body_a_client_got():
    body = (FIXTURES / "other-logs" / "api-error-body.txt").read_text()  # the apostrophe escaped: model\'s
    found = diagnose(body)
    assert (found.label, found.phase) == ("request_exceeds_context", "request")


def test_a_model_path_that_is_not_a_checkpoint_there_says_to_look_inside_the_container():
    # a path that is not there, taken for a Hub repo id (two spellings of the path), and a folder without config.json
    for line in (FIXTURES / "other-logs" / "model-path-lines.txt").read_text().splitlines():
        found = diagnose(line)
        assert (found.label, found.confidence) == ("hf_download_error", "high"), line
        assert "inside the container" in found.next_step and "config.json" in found.explanation


def test_a_gpu_index_the_process_cannot_see_is_named_with_the_passthrough_to_check():
    for line in (FIXTURES / "other-logs" / "invalid-device-ordinal.txt").read_text().splitlines():
        found = diagnose(line)
        assert (found.label, found.confidence) == ("gpu_index_out_of_range", "high"), line
        assert "passthrough" in found.explanation and "nvidia-smi -L" in found.next_step


def test_missing_driver_libraries_and_a_kernel_the_driver_refuses_are_the_driver_family():
    lines = (FIXTURES / "other-logs" / "driver-library-lines.txt").read_text().splitlines()
    # libcuda missing (raised, and as a package's import warning), NVML missing: the driver's libraries, not pip's
    for text in (lines[0], lines[1], "\n".join(lines[2:4])):
        found = diagnose(text)
        assert (found.label, found.confidence) == ("cuda_driver_too_old", "high"), text
        assert "--no-kernel-module" in found.next_step and "not from pip" in found.explanation
    # Triton's kernel refused by the driver: named over the torch.compile wrapper it surfaced through
    refused = diagnose("\n".join(lines[4:6]))
    assert (refused.label, refused.evidence[0].line_no) == ("cuda_driver_too_old", 2)
    assert "TRITON_PTXAS_PATH" in refused.next_step


def test_a_rank_that_cannot_reach_the_rendezvous_store_is_a_dist_init_timeout_outranked_by_an_exception():
    timed_out, reset, quoted = (FIXTURES / "other-logs" / "tcpstore-client-lines.txt").read_text().splitlines()
    assert (diagnose(timed_out).label, diagnose(timed_out).confidence) == ("dist_init_timeout", "high")
    for line in (reset, quoted):  # the client's retry warning alone: named, from its own words
        found = diagnose(line)
        assert (found.label, found.confidence) == ("dist_init_timeout", "medium"), line
        assert "--dist-init-addr" in found.next_step and "TCPStore" in found.explanation
    # logged while it retries: a later exception with a cause of its own is the first cause
    assert diagnose(f"{reset}\nRuntimeError: CUDA error: an illegal memory access was encountered").label == \
        "illegal_memory_access"


def test_a_torchvision_for_another_torch_and_a_missing_cuda_toolkit_are_named():
    torchvision, cuda_home = (FIXTURES / "other-logs" / "toolchain-lines.txt").read_text().splitlines()
    paired = diagnose(torchvision)
    assert (paired.label, paired.confidence, paired.phase) == ("dependency_version_mismatch", "high", "import")
    assert "torchvision release paired with the installed torch" in paired.next_step
    toolkit = diagnose(cuda_home)
    assert (toolkit.label, toolkit.confidence) == ("flashinfer_jit_error", "medium")
    assert "CUDA_HOME" in toolkit.next_step and "nvcc" in toolkit.explanation


def test_an_empty_log_says_it_is_empty_rather_than_quoting_no_lines():
    for text in ("", "\n\n   \n"):
        found = diagnose(text)
        assert (found.label, found.evidence) == ("unknown", ()) and found.explanation.startswith("the log is empty")
        assert "--kernel-log" in found.next_step


def test_a_rendezvous_store_that_never_fills_is_a_dist_init_timeout():
    for line in (FIXTURES / "other-logs" / "dist-store-timeout.txt").read_text().splitlines():
        finding = diagnose(line)
        assert (finding.label, finding.phase) == ("dist_init_timeout", "startup"), line


def test_a_container_that_sees_no_usable_gpu_is_a_driver_problem_with_the_passthrough_named():
    lines = (FIXTURES / "other-logs" / "no-usable-gpu.txt").read_text().splitlines()
    # nvidia-smi's own words for a user-space/kernel driver mismatch and an unreachable driver (corpus outputs)
    lines += [(FIXTURES / "nvidia-smi" / "error" / name).read_text().strip()
              for name in ("nvml-mismatch-oneline-shine30.txt", "no-driver-comm-shine50.txt")]
    for line in lines:
        finding = diagnose(line)
        assert (finding.label, finding.phase) == ("cuda_driver_too_old", "startup"), line
        assert "/dev/nvidia*" in finding.next_step


def test_a_name_its_dependency_lacks_is_named_even_with_the_module_cut():
    text = (FIXTURES / "other-logs" / "import-name-cut.txt").read_text()
    found = diagnose(text)
    assert (found.label, found.phase, found.evidence[-1].line_no) == ("dependency_version_mismatch", "import", 2)


def test_a_compiler_that_does_not_know_the_gpu_comes_before_the_compile_failure_it_causes():
    warning, _, failed = (FIXTURES / "other-logs" / "inductor-triton-sm120.txt").read_text().splitlines()
    # inductor's own kernel failing to compile is torch.compile's failure...
    assert diagnose(failed).label == "torch_compile_error"
    # ...but a toolchain that does not know the GPU, logged first, is the cause
    found = diagnose((FIXTURES / "other-logs" / "inductor-triton-sm120.txt").read_text())
    assert (found.label, found.evidence[0].line_no) == ("kernel_arch_unsupported", 1)
    assert "torch_compile_error" in found.also_seen and "Triton" in found.explanation


def test_a_capture_invalidated_by_an_earlier_error_is_a_capture_failure_and_yields_to_that_error():
    status, invalidated = (FIXTURES / "other-logs" / "capture-invalidated.txt").read_text().splitlines()
    for line in (status, invalidated):
        # the capture's own echo of an earlier failure: the capture family, with low confidence
        assert (diagnose(line).label, diagnose(line).confidence) == ("cuda_graph_capture_error", "low"), line
    # an earlier cause in the same text wins (here an NCCL failure inside the captured all-reduce)
    earlier = diagnose("\n".join(["RuntimeError: NCCL error: unhandled system error", invalidated]))
    assert earlier.label == "nccl_error"


def test_the_loaders_capability_gate_is_a_quantization_this_gpu_cannot_run():
    for line in (FIXTURES / "other-logs" / "quant-min-capability.txt").read_text().splitlines():
        assert diagnose(line).label == "quant_unsupported_on_gpu", line


def test_more_first_causes_in_torch_cuda_hub_and_early_sglang_words():
    # one real line per row (label TAB line): torch's rendezvous and NCCL-watchdog timeouts, CUDA error 804,
    # a kernel without code for this GPU, the Hub's not-found / offline errors, an old transformers,
    # early SGLang's spelling of the KV-pool error; a layer's tp assert, missing NVIDIA libraries and modules,
    # sgl_kernel missing or built for another torch, fa3 on a GPU it does not support, and a request the
    # OpenAI-compatible API rejects as longer than the context; a quantization method the build does not know;
    # dynamo's own exception line; the Hub's CDN timing out or refusing more retries
    rows = [row.split("\t") for row in (FIXTURES / "other-logs" / "first-cause-lines.tsv").read_text().splitlines()]
    assert len(rows) == 21
    for label, line in rows:
        assert diagnose(line).label == label, line
    # a collective that timed out is often another rank's echo: it is named, with low confidence
    watchdog = diagnose(rows[1][1])
    assert watchdog.confidence == "low" and "first rank that failed" in watchdog.next_step


def test_a_hub_timeout_is_context_that_a_later_exception_outranks():
    rows = [row.split("\t") for row in (FIXTURES / "other-logs" / "first-cause-lines.tsv").read_text().splitlines()]
    timeout = next(line for label, line in rows if "Read timed out" in line)
    alone = diagnose(timeout)
    assert (alone.label, alone.confidence) == ("hf_download_error", "low")
    # huggingface_hub retries after such a timeout; when the load then fails on its own, that failure is the cause
    first = diagnose("\n".join([timeout, rows[0][1]]))
    assert first.label == "dist_init_timeout" and "hf_download_error" in first.also_seen


def test_a_missing_module_at_import_is_a_dependency_and_sgl_kernel_its_own_package():
    rows = dict(reversed(row.split("\t")) for row in
                (FIXTURES / "other-logs" / "first-cause-lines.tsv").read_text().splitlines())
    missing = next(line for line, label in rows.items() if "No module named 'mooncake'" in line)
    kernel = next(line for line, label in rows.items() if "No module named 'sgl_kernel'" in line)
    # the traceback of an import that failed before any server_args line: placed at import
    frames = ['Traceback (most recent call last):', '  File "/usr/lib/python3.10/runpy.py", line 196, in '
              '_run_module_as_main', '    return _run_code(code, main_globals, None,']
    finding = diagnose("\n".join([*frames, missing]))
    assert (finding.label, finding.phase) == ("dependency_version_mismatch", "import")
    assert finding.evidence[-1].line_no == 4 and "mooncake" in finding.evidence[-1].text
    kernel_finding = diagnose("\n".join([*frames, kernel]))
    assert kernel_finding.label == "kernel_package_mismatch" and "missing" in kernel_finding.explanation


def test_a_traceback_of_module_imports_is_a_dependency_failure_even_when_cut():
    # sglang-764: runpy -> launch_server.py <module> -> server.py <module> -> ... cut before the ImportError
    case = next(c for c in CASES if c["id"] == "sglang-764")
    cut = diagnose(case["log_excerpt"])
    assert (cut.label, cut.phase, cut.confidence) == ("dependency_version_mismatch", "import", "low")
    assert "manager_multi.py" in cut.evidence[0].text and "not in this text" in cut.explanation
    # the same frames with an exception line no rule knows (the title of sglang-292, a real one): medium
    frames = case["log_excerpt"].splitlines()[:-1]
    whole = diagnose("\n".join([*frames, "AttributeError: 'str' object has no attribute 'eos_token_id'"]))
    assert (whole.label, whole.confidence) == ("dependency_version_mismatch", "medium")
    assert whole.evidence[-1].text.startswith("AttributeError")
    # a traceback that reached the scheduler is not an import failure
    scheduler = next(c for c in CASES if c["id"] == "sglang-2356")
    assert diagnose(scheduler["log_excerpt"]).label == "unknown"


def test_the_model_registrys_skipped_imports_are_not_a_cause():
    # a healthy startup prints "Ignore import error when loading ..." for modules it skips (real lines)
    notices = (FIXTURES / "other-logs" / "healthy-startup-notices.txt").read_text().splitlines()
    finding = diagnose("\n".join(notices))
    assert finding.label == "unknown" and finding.also_seen == ()
    assert advance(Progress(), notices).error_line is None


def test_a_log_stopping_in_piecewise_graph_compile_or_capture_is_a_hang_there_not_a_compile_error():
    # the compile step prints a dynamo UserWarning from torch/_dynamo/: a warning, not a traceback frame
    notices = (FIXTURES / "other-logs" / "healthy-startup-notices.txt").read_text().splitlines()
    progress = (FIXTURES / "other-logs" / "piecewise-graph-progress.txt").read_text().splitlines()
    compiling = diagnose("\n".join(notices + progress[:2]))
    assert compiling.label == "cuda_graph_capture_error"
    assert "after piecewise CUDA graph compilation began" in compiling.explanation
    capturing = diagnose("\n".join(notices + progress), stalled_minutes=12)
    assert (capturing.label, capturing.confidence) == ("cuda_graph_capture_error", "medium")
    assert capturing.explanation.startswith("no output for 12 minutes after CUDA graph capture began")


@pytest.mark.parametrize("case_id, where", [
    ("sglang-startup-004", "after the scheduler started (pools and graphs done)"),  # its last line: the scheduler's
    ("sglang-startup-011", "after the memory pools were allocated"),  # its only line: the KV pool's
])
def test_a_startup_log_that_just_stops_says_how_far_it_got(case_id, where):
    case = next(c for c in (json.loads(x) for x in (FIXTURES / "sglang-startup/cases.jsonl").read_text().splitlines()
                            if x) if c["id"] == case_id)
    excerpt = case["log_excerpt"]
    finding = diagnose("\n".join(excerpt) if isinstance(excerpt, list) else excerpt)
    assert finding.label == "unknown" and f"the log stops {where}" in finding.explanation


def test_the_state_pools_generic_symptom_is_read_for_every_model_with_recurrent_state():
    """sglang-28484's last line (a TypeError in the mamba state pool's bookkeeping) points to mamba_cache_error under a
    launch of any model the budget finds recurrent state in (its config.json), not only a Qwen hybrid by name: a
    Nemotron-H or LFM2 checkpoint whose path says nothing; a dense model's launch does not."""
    from bot.core.model import holds_recurrent_state
    from tests.core.test_budget import NEMOTRON_3_NANO

    line = BY_ID["sglang-28484"]["log_excerpt"]
    line = line[-1] if isinstance(line, list) else line.splitlines()[-1]
    configs = FIXTURES / "model-configs"
    lfm2 = (configs / "LiquidAI__LFM2-700M" / "config.json").read_text()
    llama = (configs / "meta-llama__Meta-Llama-3.1-8B-Instruct" / "config.json").read_text()
    assert holds_recurrent_state(lfm2) and holds_recurrent_state(json.dumps(NEMOTRON_3_NANO))
    assert not any(holds_recurrent_state(text) for text in (llama, "{not json", "{}"))
    argv = ["--model-path", "/models/nano", "--tp", "2"]
    for config, label in ((json.dumps(NEMOTRON_3_NANO), "mamba_cache_error"), (lfm2, "mamba_cache_error"),
                          (llama, "unknown")):
        context = LaunchContext.from_argv(argv, (), holds_recurrent_state(config))
        assert diagnose(line, context=context).label == label
    # by name: the Qwen hybrids (3.7 and later too), never the dense Qwen3-8B
    assert LaunchContext.from_argv(["--model-path", "/m/Qwen3.8-27B-FP8"]).hybrid_linear
    assert not LaunchContext.from_argv(["--model-path", "/m/Qwen3-8B"]).hybrid_linear


def test_a_generic_symptom_read_without_its_launch_says_which_launch_decides_it():
    # sglang-29516's one line: a shape mismatch that is the speculative path's only when the launch used it
    line = BY_ID["sglang-29516"]["log_excerpt"]
    alone = diagnose(line)
    assert alone.label == "unknown" and alone.next_step.startswith(
        "this is a generic symptom that the launch decides: with speculative decoding (--speculative-algorithm) it "
        "points to speculative_decoding_error. Give the launch's command")
    # a launch known not to use it: the usual unknown, nothing to suggest
    plain = diagnose(line, context=LaunchContext.from_argv(["--tp", "2"]))
    assert plain.label == "unknown" and plain.next_step == "read the lines above; run with --log-level debug for more"
    spec = diagnose(line, context=LaunchContext.from_argv(["--speculative-algorithm", "EAGLE"]))
    assert spec.label == "speculative_decoding_error"
    # torch's other wording of a shape mismatch (a draft whose hidden size is not the target's): the same reading
    frames = (FIXTURES / "other-logs" / "spec-hidden-size-mismatch.txt").read_text().splitlines()
    assert "speculative_decoding_error" in diagnose(frames[-1]).next_step
    standalone = diagnose(frames[-1], context=LaunchContext.from_argv(["--speculative-algorithm", "STANDALONE"]))
    assert (standalone.label, standalone.confidence) == ("speculative_decoding_error", "high")
    assert diagnose("\n".join(frames)).label == "speculative_decoding_error"  # its frames are the draft's path


def test_a_traceback_cut_before_its_exception_is_unknown_with_the_frames_lead_as_a_test():
    # a real partial case: the frames run through the speculative verify step while serving (which any kernel
    # failure there does too), then the text stops; the label rests on the thread
    finding = triage(BY_ID["sglang-8336"])
    assert finding.label == "unknown" and finding.also_seen == ("speculative_decoding_error",)
    assert finding.explanation.startswith("the log is cut inside a traceback, before its exception line")
    assert finding.next_step.startswith("find the rest of this log")
    assert finding.next_step.endswith("then check the draft model")
    assert finding.phase == "runtime"  # the frames run through the scheduler's event loop


@pytest.mark.parametrize(("case_id", "phase", "deepest"), [
    # real partial cases whose frames no rule reads: model construction, the scheduler being built, serving
    ("sglang-3436", "startup: weights", "load_model in sglang/srt/model_loader/loader.py"),
    ("sglang-2356", "startup", "run_scheduler_process in sglang/srt/managers/scheduler.py"),
    ("sglang-2102", "runtime", "event_loop_normal in sglang/srt/managers/scheduler.py"),
])
def test_a_traceback_cut_where_no_rule_reads_says_so_and_where_its_frames_place_it(case_id, phase, deepest):
    case = BY_ID[case_id]
    finding = triage(case)
    assert (finding.label, finding.confidence, finding.phase) == ("unknown", "low", phase)
    assert finding.explanation.startswith("the log is cut inside a traceback, before its exception line")
    assert f"the deepest frame is {deepest};" in finding.explanation
    assert finding.next_step.startswith("find the rest of this log")
    lines = case["log_excerpt"].split("\n")
    assert [e.line_no for e in finding.evidence] == [len(lines) - 1, len(lines)]  # the deepest frame, its code
    # the same frames with their exception after them are no longer cut
    whole = triage({**case, "log_excerpt": case["log_excerpt"] + "\nAssertionError: 7 is not divisible by 2"})
    assert not whole.explanation.startswith("the log is cut")


def test_text_ending_in_indented_lines_that_are_not_frames_is_not_read_as_a_cut_traceback():
    # a real print(model) ends in indented lines: without a traceback header, only frames at the very end say "cut"
    printed = (FIXTURES / "other-logs" / "qwen2.5-vl-7b-visual-print.txt").read_text()
    frames = BY_ID["sglang-3436"]["log_excerpt"]
    for text in (printed, frames + "\n" + printed):
        assert not diagnose(text).explanation.startswith("the log is cut")
    assert diagnose(printed + "\n" + frames).explanation.startswith("the log is cut")


@pytest.mark.parametrize(("case_id", "label", "site", "frame"), [
    # real partial cases: the frames stop inside the step that failed, the exception line is not in the text
    ("sglang-pr3582", "speculative_decoding_error", "building the speculative draft worker",
     "self.draft_worker = EAGLEWorker("),
    ("sglang-467", "unsupported_architecture", "looking up the model class",
     "model_class = get_model_cls_by_arch_name(architectures)"),
    ("sglang-465", "weight_load_oom", "allocating a weight tensor", "weight = Parameter(torch.empty("),
    ("sglang-2133", "torch_compile_error", "torch.compile generated and loaded a graph's code",
     'File "/root/anaconda3/lib/python3.12/site-packages/torch/_inductor/codecache.py", line 3062'),
])
def test_a_traceback_cut_inside_the_step_that_failed_names_that_step_with_low_confidence(case_id, label, site,
                                                                                         frame):
    case = BY_ID[case_id]
    finding = triage(case)
    assert (finding.label, finding.confidence, finding.phase) == (label, "low", "startup")
    assert finding.explanation.startswith(f"the log is cut inside a traceback, before its exception line, while {site}")
    (evidence,) = finding.evidence
    lines = case["log_excerpt"].split("\n")
    assert lines[evidence.line_no - 1].strip() == evidence.text and evidence.text.startswith(frame)
    assert finding.next_step.startswith("find the rest of this log")
    # the same frames with the exception line after them: the exception decides, not the site
    whole = diagnose(case["log_excerpt"] + "\nRuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/"
                     "ProcessGroupNCCL.cpp:1970, unhandled system error")
    assert whole.label == "nccl_error"


def test_a_log_stopping_in_nccl_setup_is_a_hang_at_distributed_init_and_later_stages_win():
    # real NCCL_DEBUG=INFO lines of a 16-rank job's communicator setup; the text stops there
    nccl = (FIXTURES / "other-logs" / "nccl-info-setup.txt").read_text().splitlines()
    finding = diagnose("\n".join(nccl), stalled_minutes=20)
    assert (finding.label, finding.confidence) == ("dist_init_timeout", "medium")
    assert finding.explanation == "no output for 20 minutes after distributed init began - a hang at distributed " \
                                  "init (rendezvous)"
    # the furthest stage a log reached decides, wherever NCCL prints: before a capture that never ended
    startup = next(json.loads(x) for x in (FIXTURES / "sglang-startup/cases.jsonl").read_text().splitlines()
                   if '"id": "sglang-startup-007"' in x)["log_excerpt"]
    later = diagnose("\n".join(nccl + startup) + "\n" + nccl[-1])
    assert later.label == "cuda_graph_capture_error" and "after CUDA graph capture began" in later.explanation


STARTUP = [json.loads(line) for line in (FIXTURES / "sglang-startup/cases.jsonl").read_text().splitlines() if line]


def _excerpt_text(case):
    excerpt = case.get("log_excerpt")
    if isinstance(excerpt, str) and excerpt.startswith("["):
        import ast

        excerpt = ast.literal_eval(excerpt)
    return "\n".join(excerpt) if isinstance(excerpt, list) else str(excerpt or "")


def test_a_healthy_start_is_no_failure_and_an_error_after_ready_is_not():
    healthy = [c for c in STARTUP if "fired up and ready to roll" in _excerpt_text(c)]
    assert len(healthy) >= 10  # real startup logs that reached ready
    for case in healthy:
        text = _excerpt_text(case)
        finding = diagnose(text, stalled_minutes=45.0)  # an idle server's log stops growing: still no failure
        assert finding.label == "no_failure", case["id"]
        (evidence,) = finding.evidence
        assert "fired up and ready to roll" in evidence.text and text.split("\n")[evidence.line_no - 1].strip() == \
            evidence.text
    # the same log, then a real serving failure: the failure is named, not "no failure"
    oom = next(line for c in CASES if c["label"] == "runtime_oom" and c["quality"] != "partial"
               for line in c["log_excerpt"].split("\n") if "out of memory. Try to lower your batch size" in line)
    assert diagnose(_excerpt_text(healthy[0]) + "\n" + oom).label == "runtime_oom"
    # and an error no rule knows, after ready, stays unknown with its lines quoted
    assert diagnose(_excerpt_text(healthy[0]) + "\nException in callback: something failed").label == "unknown"


def _tsv(name):
    return [tuple(row.split("\t")) for row in (FIXTURES / "other-logs" / name).read_text().splitlines()]


def test_gpus_other_processes_hold_and_pools_in_their_newer_words_are_named():
    rows = _tsv("newer-first-cause-lines.tsv")
    assert len(rows) == 7
    for label, line in rows:
        assert diagnose(line).label == label, line
    # SGLang's balance check at start-up: other processes hold memory, and the numbers say how much
    finding = diagnose(rows[0][1])
    assert (finding.label, finding.confidence, finding.phase) == ("gpu_memory_occupied", "high", "startup")
    assert "one GPU had only 16.28 GB free against 46.81 GB" in finding.explanation
    assert "/gpu free" in finding.next_step
    assert len(finding.evidence) == 1  # the line matches both forms of the rule; it is quoted once
    # the request-slot pool and the token pool running out while serving are one label, whatever the version says
    assert {diagnose(line).phase for _, line in rows[1:3]} == {"runtime"}


def test_torch_oom_report_says_how_much_other_processes_held():
    shared, container_like, small = (FIXTURES / "other-logs" / "torch-oom-reports.txt").read_text().splitlines()
    note = diagnose(shared).notes[-1]
    # 33.69 + 1.78 + 2.51 + 2.23 GiB + (860 + 862) MiB = 41.89 GiB, besides this process's 802.00 MiB
    assert "GPU 0 has 44.42 GiB, 24.69 MiB free when 50.00 MiB more was asked" in note
    assert "this process held 802.00 MiB; 6 other processes held 41.89 GiB" in note  # and one holding 0 bytes
    assert "796037" not in note
    assert "PID 795630 33.69 GiB" in note and "..." in note and "did not count" in note and "/gpu free" in note
    # torch could not find its own PID (a container's namespace): the list is given, nobody is blamed
    note = diagnose(container_like).notes[-1]
    assert note.endswith("processes holding it (this one among them): PID 3449556 78.37 GiB, PID 2789996 414.00 MiB")
    # 26.06 MiB + 1.08 GiB + 468.00 MiB = 1.56 GiB of a 14.56 GiB GPU: more than 5 % of it is flagged
    note = diagnose(small).notes[-1]
    assert "3 other processes held 1.56 GiB" in note and "did not count" in note
    # a process that held the whole GPU itself: nobody else to name (a real case, wrapped by the terminal)
    lsglang = BY_ID["lsglang-7"]
    finding = triage(lsglang)
    assert finding.label == "weight_load_oom"
    assert finding.notes[-1] == ("torch's report: GPU 1 has 47.37 GiB, 4.31 MiB free when 24.00 MiB more was "
                                 "asked; this process held 47.35 GiB")
    # several ranks' reports one after another: each is its own (the first one's holders only)
    first = diagnose("\n".join([shared, container_like, small])).oom
    assert first is not None and first.this_process == "802.00 MiB" and len(first.holders) == 6
    assert 3449556 not in dict(first.holders)
    # a report cut before the GPU's size, then another rank's whole report: that one is not this cause's
    cut_then_other = diagnose(BY_ID["sglang-5285"]["log_excerpt"] + "\n" + small)
    assert cut_then_other.label == "cuda_graph_oom" and cut_then_other.oom is None
    # a message cut before the GPU's size (sglang-5285) adds no note
    assert triage(BY_ID["sglang-5285"]).notes == ()


def test_capture_wrappers_of_every_runner_and_newer_triton_fp8_wording():
    text = (FIXTURES / "other-logs" / "prefill-graph-capture.txt").read_text()
    finding = diagnose(text)
    # the breakable prefill runner's wrapper, quoted without a colon: capture failed, not for memory
    assert (finding.label, finding.phase) == ("cuda_graph_capture_error", "startup: CUDA graphs")
    assert finding.evidence[0].line_no == 4
    # the same wrapper around an out-of-memory is the capture's OOM (a real torch message, placed after it)
    oom = (FIXTURES / "other-logs" / "torch-oom-reports.txt").read_text().splitlines()[0]
    wrapped = text.rsplit("\n", 2)[0] + "\nException: Capture prefill CUDA graph failed: " + oom.split(": ", 1)[1]
    assert diagnose(wrapped).label == "cuda_graph_oom"


def test_the_balance_check_as_a_warning_yields_to_the_failure_after_it():
    (_, refusal), *_ = _tsv("newer-first-cause-lines.tsv")
    warning = refusal.removeprefix("RuntimeError: ")  # the check switched off: SGLang logs the same words, and goes on
    alone = diagnose(warning)
    assert (alone.label, alone.confidence) == ("gpu_memory_occupied", "low")
    oom = (FIXTURES / "other-logs" / "torch-oom-reports.txt").read_text().splitlines()[0]
    then = diagnose("\n".join([warning, oom]))
    assert then.label == "weight_load_oom" and "gpu_memory_occupied" in then.also_seen
    # raised, it is the cause whatever follows
    assert diagnose("\n".join([refusal, oom])).label == "gpu_memory_occupied"


def test_a_checkpoint_that_ships_code_and_a_full_disk_are_named_beyond_the_corpus_labels():
    rows = dict((line, label) for label, line in _tsv("newer-first-cause-lines.tsv"))
    remote = next(line for line in rows if "trust_remote_code=True" in line)
    disk = next(line for line in rows if "Errno 28" in line)
    finding = diagnose(remote)
    assert (finding.label, finding.confidence) == ("trust_remote_code_required", "high")
    assert "--trust-remote-code" in finding.next_step
    assert diagnose(disk).label == "disk_full"
    # a full disk is a first cause: the import error it leads to is not (a real ModuleNotFoundError after it)
    missing = next(line for label, line in _tsv("first-cause-lines.tsv") if "No module named 'mooncake'" in line)
    assert diagnose("\n".join([disk, missing])).label == "disk_full"


def test_nccls_own_no_space_is_dev_shm_too_small_not_a_full_disk():
    text = (FIXTURES / "other-logs" / "nccl-shm-no-space.txt").read_text()
    finding = diagnose(text)
    assert finding.label == "nccl_error" and "disk_full" not in finding.also_seen
    assert "posix_fallocate failed : No space left on device" in finding.evidence[0].text


def test_an_out_of_memory_raised_through_the_draft_workers_frames_is_named_by_its_own_text():
    # real frames of a draft worker being built (cut there), then a real weight-load OOM line: the exception's own
    # text decides, the draft worker's frames are listed beside it
    frames = BY_ID["sglang-pr3582"]["log_excerpt"]
    oom_line = next(x for c in CASES if c["label"] == "weight_load_oom" for x in c["log_excerpt"].splitlines()
                    if "CUDA out of memory" in x)
    finding = diagnose(frames + "\n" + oom_line)
    assert (finding.label, finding.confidence) == ("weight_load_oom", "medium")
    assert "speculative_decoding_error" in finding.also_seen
    assert finding.evidence[0].text == oom_line.strip()[:400]


def test_frames_of_newer_speculative_workers_name_the_speculative_path():
    # a real trace through SGLang's v2 EAGLE worker (eagle_worker_v2.py, eagle_info_v2.py) whose exception names
    # no known failure
    text = (FIXTURES / "other-logs" / "spec-v2-invalid-forward-mode.txt").read_text()
    finding = diagnose(text)
    assert (finding.label, finding.confidence) == ("speculative_decoding_error", "low")
    assert [e.line_no for e in finding.evidence] == [1, 3, 5]
    assert diagnose(text.replace("speculative/", "managers/")).label == "unknown"  # the package's frames decided
    # the newer scheduler builds its draft worker through the algorithm's factory: cut there, that step is named
    cut = ("Traceback (most recent call last):\n"
           '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 420, in __init__\n'
           "    self.draft_worker = self.spec_algorithm.create_draft_worker(")
    site = diagnose(cut)
    assert site.label == "speculative_decoding_error" and "building the speculative draft worker" in site.explanation


def test_kernel_faults_under_their_other_cuda_codes_are_the_illegal_memory_access_family():
    # real lines: torch's NCCL watchdog carrying the fault (not an NCCL failure), and the RuntimeError itself
    for line in (FIXTURES / "other-logs" / "cuda-launch-failure.txt").read_text().splitlines():
        finding = diagnose(line)
        assert (finding.label, finding.confidence) == ("illegal_memory_access", "high"), line
        assert "unspecified launch failure 719" in finding.explanation
    # a code-700 fault keeps its own explanation
    assert "(code 700)" in diagnose("RuntimeError: CUDA error: an illegal memory access was encountered").explanation


def test_a_childs_death_reported_by_the_launcher_or_the_watchdog_is_an_echo_that_reads_its_exit_code():
    # real lines, one log per block: the launcher finding a scheduler dead ("Exit code: 1"), newer releases'
    # watchdog on a segfault (-11), and on a child SGLang itself tore down (-3) with the SIGQUIT echo after it
    blocks = (FIXTURES / "other-logs" / "child-exit-lines.txt").read_text().split("\n\n")
    launcher, segfault, teardown = (diagnose(b) for b in blocks)
    for finding in (launcher, segfault, teardown):
        assert (finding.label, finding.confidence) == ("child_process_died", "low")
    assert "the rank 0 scheduler exited with code 1: a Python error ended it" in launcher.explanation
    assert [e.line_no for e in launcher.evidence] == [1, 2]  # the death, and the line with its code
    assert "scheduler_0 exited with code -11: SIGSEGV, a segmentation fault in native code" in segfault.explanation
    assert "code -3: SIGQUIT, SGLang's own teardown" in teardown.explanation
    assert [e.line_no for e in teardown.evidence] == [1, 2]
    # a SIGKILL points at the kernel's OOM killer first
    killed = diagnose(blocks[0].replace("Exit code: 1", "Exit code: -9"))
    assert "SIGKILL" in killed.explanation and killed.next_step.startswith("read the node's kernel log for the OOM")
    # with the child's own error in the text, that error is the cause and the death is listed beside it
    oom_line = next(x for c in CASES if c["label"] == "weight_load_oom" for x in c["log_excerpt"].splitlines()
                    if "CUDA out of memory" in x)
    caused = diagnose(oom_line + "\n" + blocks[0])
    assert caused.label == "weight_load_oom" and caused.also_seen == ("child_process_died",)


def test_a_context_longer_than_the_models_is_named_when_sglang_refuses_it_not_when_it_warns():
    """ModelConfig raises it (``To allow overriding this maximum, set the env var ...``) before anything loads: the
    budget's prediction of that text, and SGLang's newer spelling with its "Warning: " lead, are both named. The
    same words logged as a warning on a healthy start (a draft's context, or an override the env var allows) are
    not a failure."""
    from bot.core.budget import context_over_derived_text

    predicted = context_over_derived_text(524288, 262144)  # what the pre-flight says SGLang prints
    newer = predicted.replace("ValueError: User-specified", "ValueError: Warning: User-specified")
    for refusal in (predicted, newer):
        finding = diagnose(refusal)
        assert (finding.label, finding.confidence, finding.phase) == ("context_length_over_model", "high", "startup")
        assert "--context-length" in finding.next_step or "context length" in finding.next_step
    healthy = (FIXTURES / "other-logs" / "context-length-warnings.txt").read_text()
    assert diagnose(healthy).label != "context_length_over_model"
    assert all(diagnose(line).label != "context_length_over_model" for line in healthy.splitlines())


def _argparse_refusal(prog: str, argv: list[str]) -> str:
    """What Python's argparse itself prints when it refuses ``argv`` (a parser with a few of SGLang's flags)."""
    import argparse
    import contextlib
    import io

    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--tp-size", type=int)
    parser.add_argument("--context-length", type=int)
    parser.add_argument("--context-length-warning", action="store_true")
    parser.add_argument("--kv-cache-dtype", choices=["auto", "fp8_e4m3"])
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit):
        parser.parse_args(argv)
    return err.getvalue()


def test_a_launch_command_sglangs_parser_refuses_is_named_by_its_complaint():
    """SGLang's argparse stops the launch before anything starts: a real capture (a flag the installed release did
    not have), and each of argparse's own refusals as Python prints them (a bad value, a bad choice, an ambiguous
    abbreviation, a missing required flag, a mistyped flag under `sglang serve`)."""
    real = (FIXTURES / "other-logs" / "unrecognized-arguments.txt").read_text()
    finding = diagnose(real)
    assert (finding.label, finding.confidence, finding.phase) == ("launch_argument_error", "high", "startup")
    assert [e.line_no for e in finding.evidence] == [4]
    assert "unrecognized arguments: --disaggregation-decode-url" in finding.evidence[0].text
    refusals = [
        _argparse_refusal("launch_server.py", ["--model-path", "m", "--tp-size", "two"]),
        _argparse_refusal("launch_server.py", ["--model-path", "m", "--kv-cache-dtype", "fp8"]),
        _argparse_refusal("launch_server.py", ["--model-path", "m", "--context", "4096"]),
        _argparse_refusal("launch_server.py", ["--tp-size", "2"]),
        _argparse_refusal("sglang serve", ["--model-path", "m", "--context-lenght", "4096"]),
    ]
    for text in refusals:
        found = diagnose(text)
        assert found.label == "launch_argument_error", text
        assert found.evidence[0].text.split(": error: ")[1] in text
    # the flags named in prose, and argparse's usage line on its own, are not the refusal
    assert diagnose("usage: launch_server.py [-h] --model-path MODEL_PATH [--tp-size TP_SIZE]").label \
        != "launch_argument_error"
    assert diagnose("note: error: unrecognized arguments are refused by SGLang").label != "launch_argument_error"


def test_failures_quoted_in_public_threads_are_named_by_their_own_words():
    """Lines as SGLang users met them (one per row, sources in SOURCES.md): a FlashInfer JIT build failing in nvcc's
    and ninja's words without FlashInfer's frames, a transformers newer than the SGLang, the hybrid state pool out of
    ping-pong slots, an uncorrectable ECC error, the driver API's names of the illegal-address family, flash-attn's
    older refusal of a pre-Turing GPU, fa3 refusing an FP8 KV cache on Ampere, SGLang's own version check finding an
    older package (sgl-kernel's own label), the piecewise CUDA-graph runner's failure, FlashInfer without the
    model's head dimension (under a capture wrapper: the wrapped refusal names it), causal_conv1d refusing a
    hybrid model's conv state in another dtype, a quantization scheme's capability check (both of the ways SGLang
    printed it), and a multi-layer EAGLE draft refusing the speculative parameters SGLang chose for the model."""
    rows = [row.split("\t") for row in (FIXTURES / "other-logs" / "thread-first-cause-lines.tsv").read_text()
            .splitlines()]
    assert len(rows) == 22
    for label, line in rows:
        assert diagnose(line).label == label, line
    ecc = diagnose(next(line for label, line in rows if label == "gpu_hardware_error"))
    assert ecc.confidence == "high" and "hardware fault" in ecc.explanation
    assert "ROW_REMAPPER" in ecc.next_step and "--base-gpu-id" in ecc.next_step
    newer = diagnose(next(line for label, line in rows if "already used by a Transformers model" in line))
    assert "newer than this SGLang" in newer.explanation and newer.phase == "import"
    pool = diagnose(rows[5][1])
    assert "--mamba-full-memory-ratio" in pool.next_step and pool.phase == "runtime"
    params = diagnose(rows[21][1])
    assert params.confidence == "high" and "--speculative-num-steps" in params.next_step


def test_a_conv_state_in_another_dtype_than_the_model_is_the_hybrid_state_not_torch_in_general():
    """sglang#31719 (a Qwen3.6-27B served with --dtype float16): torch refuses to index-put float16 activations into
    the bfloat16 conv state, under the conv state's own frame; the same refusal anywhere else (pytorch#130549's
    loss_parallel) is no hybrid-state failure."""
    finding = diagnose((FIXTURES / "other-logs" / "conv-state-dtype.txt").read_text())
    assert (finding.label, finding.confidence, finding.phase) == ("mamba_cache_error", "high", "runtime")
    assert finding.evidence[0].line_no == 3 and "SGLANG_MAMBA_CONV_DTYPE (bfloat16 unless set)" in finding.explanation
    assert "SGLANG_MAMBA_CONV_DTYPE set to the dtype the model runs in" in finding.next_step
    elsewhere = ("[rank1]: RuntimeError: Index put requires the source and destination dtypes match, got BFloat16 for "
                 "the destination and Float for the source.")
    assert diagnose(elsewhere).label == "unknown"


def test_a_draft_models_own_module_in_the_frames_points_to_speculative_decoding():
    # sglang#13352: EAGLE3 with topk > 1 under spec v2, failing in the draft model's forward
    finding = diagnose((FIXTURES / "other-logs" / "eagle3-draft-frames.txt").read_text())
    assert (finding.label, finding.confidence) == ("speculative_decoding_error", "low")
    assert "llama_eagle3.py" in finding.evidence[0].text


def test_sglangs_fallback_from_custom_all_reduce_is_a_warning_not_the_cause():
    """Two RTX 4090 without P2P: SGLang logs that custom all-reduce could not be set up, falls back to NCCL and loads
    on (a real start-up log). The warning is noted, never named as the cause; what fails later is."""
    log = (FIXTURES / "other-logs" / "custom-allreduce-fallback.txt").read_text()
    loading = diagnose(log)
    assert loading.label != "gpu_p2p_unsupported" and "weight loading began" in loading.explanation
    assert loading.notes[-1].startswith("line 8: SGLang could not set up its custom all-reduce and fell back to NCCL")
    assert all("Setup Custom allreduce" not in e.text for e in loading.evidence)
    kv_error = next(json.loads(x) for x in (FIXTURES / "sglang-failures" / "cases.jsonl").read_text().splitlines()
                    if json.loads(x)["label"] == "kv_pool_oom" and json.loads(x)["quality"] == "error_line")["evidence"]
    failed = diagnose(log + kv_error + "\n")
    assert failed.label == "kv_pool_oom" and "gpu_p2p_unsupported" not in failed.also_seen


def test_a_child_exception_no_rule_reads_is_quoted_before_the_parents_echo():
    """An unruled exception and then the parent's word that a child died (sglang#24153's assertion, followed by the
    sigquit line as sglang#12827's log prints it): the exception is quoted, the echo named beside it, not "the
    child's own error is not in this text". Tracebacks after the echo (the teardown's) do not count."""
    trace = (FIXTURES / "other-logs" / "swa-radix-assert.txt").read_text()
    echo = "[2025-11-06 02:10:00] Received sigquit from a child process. It usually means the child failed.\n"
    finding = diagnose(trace + echo)
    assert finding.label == "unknown" and finding.also_seen == ("child_process_died",)
    assert finding.evidence[-1].text.startswith("AssertionError: dec_lock_ref")
    assert "its echo" in finding.explanation and "not in this text" not in finding.explanation
    assert diagnose(echo).label == "child_process_died"
    assert "not in this text" in diagnose(echo).explanation


def test_a_checkpoint_tensor_the_model_class_lacks_is_a_loader_that_does_not_handle_it():
    """load_weights' params_dict lookup failing on a checkpoint tensor: sglang#3075 (DeepSeek-V3's FP8 scales under
    --enable-ep-moe) and PR #12031's thread (deepseek-ocr's lm_head, then the parent's echo). A KeyError elsewhere is
    not this."""
    for name, tensor in (("load-weights-keyerror.txt", "w2_weight_scale_inv"),
                         ("load-weights-keyerror-echo.txt", "lm_head.weight")):
        finding = diagnose((FIXTURES / "other-logs" / name).read_text())
        assert (finding.label, finding.confidence, finding.phase) == ("unsupported_architecture", "high", "startup")
        assert tensor in finding.evidence[0].text and "has no parameter for" in finding.explanation
        assert "--quantization matches" in finding.next_step
    assert diagnose("KeyError: 'lm_head.weight'").label == "unknown"


def test_a_log_ending_in_an_exception_no_rule_reads_quotes_where_it_was_raised():
    """sglang#24153: SWARadixCache's lock-count assertion while serving. No rule names it; the finding quotes the
    frame that raised it, the code there and the exception, and places it by its frames (serving)."""
    trace = (FIXTURES / "other-logs" / "swa-radix-assert.txt").read_text()
    finding = diagnose(trace)
    assert (finding.label, finding.phase) == ("unknown", "runtime")
    assert [e.line_no for e in finding.evidence] == [16, 17, 18]
    assert finding.evidence[0].text.endswith("in dec_lock_ref") and finding.evidence[1].text == "node.swa_lock_ref > 0"
    assert "ends in an exception no rule reads" in finding.explanation
    # after a start-up that reached the weights (the real 4090 log, joined to this trace), the log stopped because of
    # the exception: not "a hang while loading weights"
    started = (FIXTURES / "other-logs" / "custom-allreduce-fallback.txt").read_text()
    joined = diagnose(started + trace)
    assert "hang" not in joined.explanation and joined.evidence[-1].text.startswith("AssertionError: dec_lock_ref")
    assert "hang while loading weights" in diagnose(started).explanation


def test_the_piecewise_runners_failure_is_a_capture_error_whatever_stage_it_struck():
    """A real log: SGLang's piecewise runner failing while serving (its wrapper, then its advice, then a scheduler
    traceback cut short). Its own message names the failure; an out-of-memory it wraps would be cuda_graph_oom."""
    log = (FIXTURES / "other-logs" / "piecewise-graph-failed.txt").read_text()
    finding = diagnose(log)
    assert (finding.label, finding.confidence, finding.phase) == ("cuda_graph_capture_error", "medium", "runtime")
    assert [e.line_no for e in finding.evidence] == [11, 13]
    assert "piecewise" in finding.explanation and "--disable-piecewise-cuda-graph" in finding.next_step
