"""Triage rules over an SGLang log: the first cause, not its echo.

Each rule names a failure (the label set of the failure corpus), the text that proves it, and
the phase it belongs to. Reading order matters: logs exported newest-first are put back in
time order; `Received sigquit from a child process` is an echo, used only when nothing else
explains the log; `Capture cuda graph failed:` is a wrapper whose tail decides the label; a log
that just stops is diagnosed from where it stopped.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from bot.core.argv import LOG_HEAD_BYTES, LOG_TAIL_BYTES, LogExcerpt
from bot.core.flags import scrub_secrets
from bot.core.log_lines import collected_lines, plain_lines, strip_ansi, unwrapped
from bot.core.report import age_text
from bot.core.startup_log import (
    BENIGN_NOTICE,
    CAPTURE_BAR,
    CAPTURE_LINE,
    CHILD_CRASHED_LINE,
    COMPILE_BAR,
    LOAD_END_LINE,
    READY_LINE,
    SCHEDULER_DEAD_LINE,
    SCHEDULER_LINE,
)

ECHO = "child_process_died"
# torch.cuda's warning for a GPU its build has no kernels for: the GPU's capability, then (next line) the build's
TORCH_ARCH_WARNING = r"with CUDA capability (?P<sm>sm_\d+) is not compatible with the current PyTorch installation"
_TORCH_ARCHES = re.compile(r"current PyTorch install supports CUDA capabilities (?P<arches>(?:sm_\d+\w? ?)+)")
# SGLang's wrapper around a capture failure, in each runner's words: "Capture cuda graph failed:", the piecewise
# prefill runner's "Capture prefill CUDA graph failed:", "Capture extend cuda graph failed:" (quoted without its colon
# when nothing follows)
CAPTURE_WRAPPER = r"Capture (?:\w+ ){0,2}(?i:cuda) graph failed\b:?"
# the piecewise runner's (prefill graphs torch.compile traces; on by default in newer releases), logged with the
# exception after it, capturing at start-up or replaying while serving
PIECEWISE_WRAPPER = r"Piecewise CUDA Graph failed(?: with error)?:"
# lines that place a capture failure or hang in the piecewise runner: its wrapper, its advice, its progress bars
PIECEWISE_LINE = (rf"{PIECEWISE_WRAPPER}|add --disable-piecewise-cuda-graph to your launch command|{COMPILE_BAR}|"
                  r"Capturing num tokens")
# the scheduler building its speculative draft worker: by class, or through the algorithm's factory (newer releases)
DRAFT_WORKER_FRAME = r"self\.draft_worker = (?:\w*Worker|self\.spec_algorithm\.create_draft_worker)\("
NO_FAILURE = "no_failure"  # the server came up and nothing after that reports an error
# a launch still starting, silent for less than a hang; one stopped on request before it said it failed or hung
STILL_STARTING, STOPPED_ON_REQUEST = "still_starting", "stopped_on_request"
NOT_A_CAUSE = frozenset({"unknown", NO_FAILURE, STILL_STARTING, STOPPED_ON_REQUEST})  # findings naming no first cause
# not labels of the failure corpus: other processes hold memory on the launch's GPUs (an earlier run's leftovers);
# a GPU that refuses a new CUDA context (exclusive compute mode taken, or a bad device state)
OCCUPIED = "gpu_memory_occupied"
BUSY = "gpu_busy"
# a rank asked for a GPU index the process cannot see: fewer GPUs visible (CUDA_VISIBLE_DEVICES, the container's
# passthrough) than tp x pp x dp from --base-gpu-id needs
OUT_OF_RANGE = "gpu_index_out_of_range"
# the kernel's OOM killer killed the launch (a container's memory limit or the node's RAM): read in the node's kernel
# log, not the launch's own (a process killed that way writes nothing)
HOST_OOM_KILL = "host_oom_kill"
# SGLang's ModelConfig refusing a --context-length beyond the one it derives from the model's config, before anything
# loads (the same text logged as a warning, when SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN lets it through, is not)
CONTEXT_OVER_MODEL = "context_length_over_model"
# SGLang's argparse refusing the command line (a flag that release does not have, a bad value, an ambiguous prefix):
# Python's "<prog>: error: <message>", and the process exits 2 before anything starts
ARGUMENT_ERROR = "launch_argument_error"
# the GPU's own memory failed (an uncorrectable ECC error): hardware, not the launch; the node's ECC counters and Xid
# events say which GPU and whether a reset clears it
HARDWARE = "gpu_hardware_error"
# the server came up, but its own warmup request went out through an HTTP proxy (http_proxy/https_proxy/all_proxy set
# for the model download, no_proxy not exempting the server's address), which answered 502/403/407 instead of it
WARMUP_PROXY = "warmup_through_proxy"
# the container-side fix for the driver family: the node's own driver version, without its kernel module
NODE_DRIVER_LIBRARIES = ("install in the container the NVIDIA user-space libraries of exactly the node's driver "
                         "version (the installer's --no-kernel-module)")
OCCUPIED_WHY = ("other processes hold memory on some of this launch's GPUs: before loading, SGLang found one "
                "tensor-parallel rank's GPU with far less free memory than another's (it wants at least 90 %)")
MAMBA_FAILED = "the hybrid (mamba/linear-attention) state pool or its radix cache failed"
CONV_DTYPE_FAILED = ("the hybrid model's conv state is held in another dtype than the model runs in: SGLang keeps it "
                     "in SGLANG_MAMBA_CONV_DTYPE (bfloat16 unless set), whatever --dtype or the checkpoint (a float16 "
                     "or AWQ build) says, so the first request cannot write its input into it")
CONV_DTYPE_NEXT = ("relaunch with SGLANG_MAMBA_CONV_DTYPE set to the dtype the model runs in (the source dtype the "
                   "error names: Half is float16), or run the model in bfloat16 (--dtype bfloat16) if its "
                   "quantization allows; /sglang budget flags this before the load")
# the failure in causal_conv1d's words (they name no dtype), and torch's index-put refusal (which names both: "got
# BFloat16 for the destination and Half for the source"); the experiments set the variable from the dtype named
CONV_KERNEL_LINE = r"Expected conv_states_\.scalar_type\(\) == input_type"
INDEX_PUT_LINE = r"Index put requires the source and destination dtypes match"
CONV_DTYPE_LINE = f"{CONV_KERNEL_LINE}|{INDEX_PUT_LINE}"
MAMBA_NEXT = "try --disable-radix-cache or another --mamba-scheduler-strategy"
# Python's TypeError for a None compared with or combined with a number (a setting left unset)
NONE_WITH_INT_LINE = (r"TypeError: (?:'[<>]=?' not supported between instances of 'NoneType' and 'int'|"
                      r"unsupported operand type\(s\) for [-+*]: 'NoneType' and 'int')")
OCCUPIED_NEXT = ("`/gpu status <container>` shows which processes hold the launch's GPUs; `/gpu free <container>` "
                 "stops them by PID after a confirmation; then relaunch unchanged")


@dataclass(frozen=True)
class Rule:
    label: str
    patterns: tuple[str, ...]
    phase: str  # import | startup | runtime | request
    explanation: str
    next_step: str
    strength: int = 2  # 3: the exception text itself; 2: a specific message; 1: context (frames, wrappers)
    # a pattern one of the few lines before must match (the frame that raised it) for a generic message to be this
    # rule's; empty: the line alone decides
    after: str = ""

    def compiled(self) -> tuple[re.Pattern[str], ...]:
        return tuple(re.compile(p) for p in self.patterns)


# a GPU out of memory in torch's words, the CUDA runtime's, and Triton's when loading a kernel it compiled
OOM_TEXT = r"CUDA out of memory|CUDA error: out of memory|OutOfMemoryError|Triton Error \[CUDA\]: out of memory"

RULES: tuple[Rule, ...] = (
    # the same budget too small for a sliding-window model's window pool (SGLang's pool configurator, 2026)
    Rule("kv_pool_oom", (r"SWA pool \(\d+ tokens\) cannot hold even one request",),
         "startup", "the KV budget left the sliding-window layers' pool no larger than one window plus a page, so it "
         "could never admit a request",
         "raise --swa-full-tokens-ratio (the budget computes the smallest that admits one), or grow the KV budget "
         "(--mem-fraction-static, a larger --max-total-tokens)", 3),
    # a sliding-window pool capped by the requests it may hold (SWAChunkCapPoolConfigurator, DeepSeek-V4's
    # "The DSV4 SWA pool cap") that leaves the full pool nothing
    Rule("kv_pool_oom", (r"SWA pool cap \(\d+ tokens, [\d.]+ Gi?B\) leaves no room for the full KV pool",),
         "startup", "the sliding-window pool, sized for --max-running-requests requests, took all of the KV budget "
         "and left nothing for the full-attention pool",
         "lower --max-running-requests (it sizes that pool), or raise --mem-fraction-static", 3),
    Rule("kv_pool_oom", (r"Not enought? memory\. Please try to increase --mem-fraction-static",  # early: "enought"
                         r"is larger than the profiled value -\d",
                         r"Loaded weights leave no GPU memory for the KV cache",
                         # the hybrid state pool is carved from the same budget (SGLang >= 0.5.12's joint solve)
                         r"Not enough GPU memory for hybrid \(mamba/linear-attention\) state cache",
                         r"Hybrid \(mamba/linear-attention\) state cache is too small to serve any requests"),
         "startup", "after the weights, the static memory budget left nothing for the KV cache pool",
         "raise --mem-fraction-static, or shrink what the pool must hold (hybrid state, draft tokens, TP)", 3),
    Rule("cuda_graph_oom", (rf"(?:{CAPTURE_WRAPPER}|{PIECEWISE_WRAPPER}).*(?:{OOM_TEXT})",),
         "startup: CUDA graphs", "CUDA-graph capture ran out of memory in the non-static reserve",
         "lower --mem-fraction-static or --cuda-graph-max-bs (capture needs room outside the static pool)", 3),
    # FlashInfer's bump allocator over its fixed workspace, in each release's words: "Failed to allocate memory for
    # <buffer> with size", the newer "Buffer overflow when allocating memory for <buffer>", the oldest (misspelt)
    # "Out of workspace memory in AlignedAlloactor"
    Rule("flashinfer_workspace_oom", (r"Failed to allocate memory for \w+ with size \d+",
                                      r"Buffer overflow when allocating memory for \w+ with size \d+",
                                      r"bytes available in AlignedAllocator",
                                      r"Out of workspace memory in AlignedAllo"),
         "runtime", "FlashInfer's fixed workspace buffer overflowed planning a large batch or a long prefill (its own "
                    "buffer, not the GPU's memory)",
         "raise SGLANG_FLASHINFER_WORKSPACE_SIZE (bytes; SGLang's default is 384 MiB), or lower "
         "--chunked-prefill-size / --max-running-requests, or use another --attention-backend (fa3, triton)", 3),
    Rule("runtime_oom", (r"(?:(?:Decode|Prefill) out|\bOut) of memory\. Try to lower your batch size",  # newer: "Out"
                         r"alloc_req_slots runs out of memory",  # the request-slot pool (req_to_token)
                         # decode has to retract, but the one request left cannot be: the pool holds not even it
                         r"No space left for only one request"),
         "runtime", "the token pool ran out while serving", "lower --max-running-requests or the context length", 3),
    Rule("context_exceeds_kv_pool", (r"Input length \(\d+ tokens\) exceeds the maximum allowed length \(\d+ tokens\)",),
         "request", "--context-length is larger than the KV pool can hold, so long prompts are rejected",
         "lower --context-length to the pool size, or grow the pool", 3),
    Rule(CONTEXT_OVER_MODEL, (r"context_length \(\d+\) is greater than the derived context_length \(\d+\).*"
                              r"To allow overriding this maximum",
                              r"ValueError: (?:Warning: )?User-specified context_length \(\d+\) is greater than the "
                              r"derived"),
         "startup", "--context-length is longer than the context SGLang derives from the model's config (its position "
         "limit, times a rope scaling factor): it refuses before loading anything",
         "launch with the config's context length (the budget computes what fits), or extend the model's context "
         "properly (rope scaling in the config) and set SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1", 3),
    # SGLang asserts its warmup request got a 200 and prints the response (f"{res=}"): a gateway's code and an empty
    # body are a proxy's answer, not the server's (a server that failed serving it answers 500, or not at all)
    Rule(WARMUP_PROXY, (r"AssertionError: res=<Response \[(?:502|403|407)\]>",),
         "startup", "the server started, but its warmup request to itself was answered by an HTTP proxy (a gateway "
         "status, no body): http_proxy/https_proxy/all_proxy are set where it runs and no_proxy does not exempt its "
         "own address, so it gave up and exited",
         "launch with no_proxy/NO_PROXY covering 127.0.0.1, localhost, 0.0.0.0 and the --host address (or unset the "
         "proxy variables once the model is downloaded); --skip-server-warmup only hides it from clients that go "
         "through the same proxy", 3),
    Rule(ARGUMENT_ERROR, (r"^[\w./-]+(?: serve)?: error: (?:unrecognized arguments: |argument -|ambiguous option: |"
                          r"the following arguments are required: )",),
         "startup", "SGLang's argument parser refused the launch command (its exact complaint is quoted): a flag this "
         "SGLang release does not have (added in a later one, retired, or mistyped), a value it does not accept, or "
         "an abbreviation that matches several flags; nothing was started",
         "fix the flag it names and launch again: `/sglang launch` checks every flag against the installed SGLang's "
         "own parser first and offers the flag it most likely meant", 3),
    # (also as an API error body quotes it, the apostrophe escaped: "model\'s")
    Rule("request_exceeds_context", (r"The input \(\d+ tokens\) is longer than the model\\?'s context length",
                                     # the OpenAI-compatible API's wording for the same rejection
                                     r"Requested token count exceeds the model's maximum context length of \d+ tokens"),
         "request", "one request is longer than the configured context (a client error, not an engine fault)",
         "shorten the request or raise --context-length", 3),
    # the same family of asynchronous kernel faults under its other codes: 719 (a kernel faulted: an invalid pointer,
    # out-of-bounds shared memory), 715 (an illegal instruction), 716 (a misaligned address)
    Rule("illegal_memory_access", (r"CUDA error: unspecified launch failure",
                                   r"cudaError(?:LaunchFailure|IllegalInstruction|MisalignedAddress)\b",
                                   r"an illegal instruction was encountered", r"CUDA error: misaligned address",
                                   # the driver API's names, as cuda-python and Triton's launcher print them
                                   r"CUDA_ERROR_(?:LAUNCH_FAILED|ILLEGAL_INSTRUCTION|MISALIGNED_ADDRESS)\b"),
         "runtime", "a CUDA kernel faulted on the device (unspecified launch failure 719, illegal instruction 715 "
                    "or misaligned address 716: the family of an illegal memory access)",
         "rerun with CUDA_LAUNCH_BLOCKING=1 to find the kernel; check the node's Xid events (a GPU fault raises the "
         "same error); try another attention backend or the quantization kernels", 3),
    # CUDA error 214 in the runtime's, torch's and the driver API's words: the GPU's memory itself failed
    Rule(HARDWARE, (r"uncorrectable ECC error encountered", r"cudaErrorECCUncorrectable",
                    r"CUDA_ERROR_ECC_UNCORRECTABLE"),
         "runtime", "the GPU reported an uncorrectable ECC error: its memory has a hardware fault and the data on it "
                    "is corrupt (not a software bug, not this launch's flags)",
         "read the GPU's ECC counters and remapped rows on the node (`nvidia-smi -q -d ECC,ROW_REMAPPER`; the "
         "pre-flight's GPU hardware check shows them) and its Xid events (48, 63, 64, 94, 95): a pending row remap "
         "takes effect after a GPU reset once nothing holds the GPU (`/gpu free`, then `nvidia-smi -r -i <gpu>` on "
         "the node); one that failed needs service. Launch on other GPUs meanwhile (--base-gpu-id)", 3),
    Rule("illegal_memory_access", (r"an illegal memory access was encountered", r"CUDA Error: 700\b",
                                   r"cudaErrorIllegalAddress\b",
                                   r"CUDA_ERROR_ILLEGAL_ADDRESS\b",
                                   r"Failed to encode tensor map: 700", r"Starting GPU coredump generation"),
         "runtime", "a CUDA kernel touched an invalid address (code 700)",
         "rerun with CUDA_LAUNCH_BLOCKING=1, try another attention backend, check the quantization kernels", 3),
    Rule("device_side_assert", (r"Assertion `.*` failed\.", r"device-side assert triggered"),
         "runtime", "a CUDA kernel assertion fired (an index out of bounds)",
         "check token ids vs vocab size and the draft model's context vs the target's", 2),
    Rule("nccl_error", (r"NCCL error: unhandled system error", r"ncclSystemError", r"NCCL error:",
                        r"Error while creating shared memory segment", r"ncclCommInitRank failed",
                        r"NCCL WARN Call to posix_fallocate failed",  # /dev/shm too small for a segment
                        r"NCCL WARN Error: failed to extend /dev/shm/",  # the same, in NCCL's shmutils wording
                        r"NCCL error in: \S+\.(?:cpp|hpp|h|cu):\d+",  # torch's form, any torch version
                        r"\bnccl(?:UnhandledCuda|Internal|Remote|InvalidUsage)Error\b"),
         "startup", "NCCL could not set up or use its transport (shared memory, sockets, P2P)",
         "give the container more /dev/shm, or set NCCL_P2P_DISABLE=1 / NCCL_SHM_DISABLE=1 to find the transport", 3),
    # gloo's TCP pairs: a peer that closed or reset its connection, a read/write on a dead socket, or the full mesh
    # of ranks never connecting (a rank that died first drops its connections too)
    Rule("distributed_comm_error", (r"gloo/transport/tcp/pair\.cc.*Connection cl",
                                    r"gloo/transport/tcp/pair\.cc:\d+\] (?:Read|Write) error",
                                    r"Gloo connectFullMesh failed"),
         "startup", "a gloo (CPU) connection between ranks dropped or never formed",
         "read the other ranks' and nodes' logs for one that died first; otherwise set GLOO_SOCKET_IFNAME (and "
         "NCCL_SOCKET_IFNAME) to the interface the nodes reach each other on and check the firewall between them", 3),
    # a collective that never completed: often the echo of another rank that died or hung first
    Rule("dist_init_timeout", (r"Watchdog caught collective operation timeout",),
         "startup", "a collective between the ranks never completed (torch's NCCL watchdog gave up on it)",
         "look for the first rank that failed or hung before it; check --dist-init-addr and the links between GPUs", 1),
    # a rank that cannot reach the rendezvous store (torch's TCPStore at --dist-init-addr): logged while it retries,
    # so an exception that names another cause wins
    Rule("dist_init_timeout", (r"\[c10d\] TCP client failed to connect/validate to host \S+",),
         "startup", "a rank could not reach the rendezvous store (torch's TCPStore at --dist-init-addr, or the "
                    "address the ranks were given): nothing listening there yet, a wrong address or interface, or a "
                    "firewall between them",
         "check that --dist-init-addr names an address of node 0 every rank reaches, that node 0 started, and the "
         "interface the ranks use (GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME)", 2),
    Rule("dist_init_timeout", (r"waitForInput.*timed out after", r"\[c10d\].*timed out",
                               r"Timed out after \d+ seconds waiting for clients", r"DistStoreError: Socket Timeout",
                               # a rank waiting for rank 0 to publish the NCCL id through the store
                               r"store->get\('\d+'\) got error: Socket Timeout",
                               r"The client socket has timed out after \S+ while trying to connect to"),
         "startup", "ranks never met: rendezvous or a collective timed out",
         "check --dist-init-addr, firewalls and that every node started", 3),
    # SGLang's tensor-parallel check: one rank's GPU has far less free memory than another's before the load.
    # Logged as a warning when the check is switched off: then any failure after it is named first (the warning
    # is listed beside it), and the warning alone is named with low confidence
    Rule(OCCUPIED, (r"The memory capacity is unbalanced",),
         "startup", OCCUPIED_WHY, OCCUPIED_NEXT, 0),
    Rule(OCCUPIED, (r"\w+(?:Error|Exception): The memory capacity is unbalanced",),
         "startup", OCCUPIED_WHY, OCCUPIED_NEXT, 3),
    # the custom all-reduce kernel's own CUDA check failing on its IPC buffers (cudaIpcOpenMemHandle/GetMemHandle
    # answering 'invalid argument'): the same missing P2P/IPC, in other words
    Rule("gpu_p2p_unsupported", (r"custom_all_reduce\.cuh:\d+ '(?!peer access)[^']+'",),
         "startup", "custom all-reduce could not share its buffers between the GPUs' processes (CUDA IPC failed): "
                    "P2P/IPC that these GPUs, the VM/container or the allocator settings do not give it",
         "add --disable-custom-all-reduce (NCCL does the all-reduce instead)", 2),
    Rule("gpu_p2p_unsupported", (r"peer access is not supported between these two devices",),
         "startup", "custom all-reduce needs CUDA P2P, which these GPUs or this VM/container lack",
         "add --disable-custom-all-reduce", 3),
    Rule("port_in_use", (r"EADDRINUSE", r"[Aa]ddress already in use",
                         r"The server socket has failed to listen on any local network address"),
         "startup", "a port the server needs is already bound by another process",
         "stop the process holding the port (by PID), or move the launch off it: --port for the HTTP port, "
         "--nccl-port or the --dist-init-addr port for the ranks'", 3),
    # the scheduler's watchdog: "Watchdog timeout (self.watchdog_timeout=300)", newer releases "Scheduler watchdog
    # timeout (self.watchdog_timeout=300, self.soft=False)"; then it dumps the stuck process with py-spy (or fails to)
    Rule("watchdog_timeout", (r"[Ww]atchdog timeout \(self\.watchdog_timeout=", r"Pyspy failed to dump PID",
                              r"Pyspy dump for PID \d+:"),
         "runtime", "a forward step hung longer than --watchdog-timeout",
         "find the stuck kernel (py-spy dump), try another backend or disable CUDA graphs", 3),
    # a --model-path that is not a checkpoint where the server runs: a path that is not there is taken for a Hub
    # repository id, which huggingface_hub refuses; a folder (or repository) without config.json is not a checkpoint
    Rule("hf_download_error", (r"HFValidationError: Repo id must be in the form 'repo_name' or 'namespace/repo_name'",
                               r"does not appear to have a file named config\.json"),
         "startup", "--model-path does not lead to a checkpoint where the server runs: a path that is not there is "
         "taken for a Hub repository id and refused, and a folder or repository without config.json (a parent "
         "folder, an adapter, an unfinished download) is not a checkpoint",
         "check the path inside the container (`ls` it there: a host folder must be bind-mounted into the LXC "
         "container) and point --model-path at the folder that holds config.json (in a Hub cache, "
         "snapshots/<revision>); a `~` is not expanded", 3),
    Rule("hf_download_error", (r"You are trying to access a gated repo",
                               r"Cannot access gated repo for url https://huggingface\.co",
                               r"huggingface_hub\.(?:utils\._errors|errors)\.GatedRepoError"),
         "startup", "the model's repository on the Hub is gated, and the container's Hub token (if it has one) was "
         "not granted access",
         "request access on the model's Hub page, then give the container a token that has it (HF_TOKEN), or "
         "download the model where one is and launch from the local path", 2),
    # a checkpoint file that is not whole safetensors: a download or copy cut short (a full disk, most often), or
    # the ~130-byte Git LFS pointer a clone without LFS leaves in place of the weights
    Rule("hf_download_error", (r"SafetensorError: Error while deserializing header: "
                               r"(?:HeaderTooLarge|MetadataIncompleteBuffer)",),
         "startup", "a checkpoint file is not whole safetensors: its download or copy was cut short (often by a "
         "full disk), or it is a Git LFS pointer left by a clone without LFS",
         "compare the shards' sizes with the repository's, check free disk, then fetch the model again "
         "(`huggingface-cli download`, or `git lfs pull` in a clone)", 3),
    # the Hub's HTTP client timing out or giving up; huggingface_hub also logs it as a warning while it
    # retries, so it is context: an exception that names another cause wins
    Rule("hf_download_error", (r"HTTPSConnectionPool\(host='(?:cdn-lfs\.)?huggingface\.co', port=443\)",),
         "startup", "downloading the model or tokenizer from the Hub failed",
         "download the model first and launch from the local path", 1),
    Rule("hf_download_error", (r"429 Too Many Requests", r"Unable to load vocabulary from file",
                               r"We couldn't connect to 'https://huggingface\.co'",
                               r"is not a local folder and is not a valid model identifier listed on",
                               r"DetokenizerManager hit an exception",
                               r"429 Client Error: Too Many Requests for url: https://huggingface\.co",
                               r"huggingface_hub\.(?:utils\._errors|errors)\.(?:HfHubHTTPError|RepositoryNotFoundError|"
                               r"LocalEntryNotFoundError)"),
         "startup", "downloading the model or tokenizer from the Hub failed",
         "download the model first and launch from the local path", 2),
    # not labels of the failure corpus (its README: looked for, not found as SGLang logs), but failures a bring-up
    # meets: a checkpoint that ships its own code, and a full disk (downloads, compile caches, the log itself)
    Rule("trust_remote_code_required", (r"contains custom code which must be executed to correctly load",
                                        r"Please pass the argument `trust_remote_code=True`",
                                        r"requires you to execute the configuration file in that repo",
                                        r"set the option `trust_remote_code=True` to remove this error"),
         "startup", "the checkpoint ships its own modeling or config code, which transformers runs only when asked",
         "read the repository's code (it runs in the container), then relaunch with --trust-remote-code", 3),
    # NCCL's own "No space left" is /dev/shm too small for its segments: an NCCL finding, not a full disk
    Rule("disk_full", (r"^(?!.*(?:NCCL|/dev/shm|posix_fallocate)).*No space left on device",),
         "startup", "a disk filled up: the model download, a compile cache (torch inductor, Triton, FlashInfer) or "
                    "the log could not be written",
         "free space in the container (the Hugging Face cache, ~/.cache, /tmp/torchinductor_*), or point HF_HOME "
         "and TORCHINDUCTOR_CACHE_DIR at a larger disk", 3),
    # the device exists but refuses a new context: exclusive compute mode with another process on it, or a bad state
    Rule(BUSY, (r"CUDA-capable device\(s\) is/are busy or unavailable", r"cudaErrorDevicesUnavailable"),
         "startup", "a GPU refused this process a CUDA context: its compute mode lets one process at a time use it "
                    "and another holds it, or the device is in a state that takes no new work",
         "check the launch GPUs' compute mode and who holds them (/gpu status); stop the holder by PID (/gpu free) "
         "or set the mode back to Default on the node (nvidia-smi -c DEFAULT)", 3),
    Rule(OUT_OF_RANGE, (r"CUDA error: invalid device ordinal",
                        r"GPU device may be out of range, do you have enough GPUs\?"),
         "startup", "a rank asked for a GPU the process cannot see: the launch needs more GPUs (tp x pp x dp, counted "
                    "from --base-gpu-id) than CUDA_VISIBLE_DEVICES or the container's passthrough shows it; with "
                    "CUDA_VISIBLE_DEVICES set, GPU indices are counted within that list",
         "compare `nvidia-smi -L` inside the container with the GPUs the launch needs: give the container the GPUs "
         "(its /dev/nvidiaN passthrough), or lower --tp / --base-gpu-id to fit the ones it sees", 3),
    # the checkpoint holds a tensor the model class's load_weights has no parameter for (its params_dict lookup): a
    # layout or quantization of the checkpoint this release's loader does not handle (sglang#3075, #10175, #12827)
    Rule("unsupported_architecture", (r"KeyError: '(?:[\w-]+\.)+[\w-]+'",),
         "startup", "the checkpoint holds a tensor this SGLang's model class has no parameter for: a checkpoint layout "
                    "or quantization its loader does not handle (or weights that are not the model config.json names)",
         "check the SGLang release against this checkpoint (a later one may load it: the model's cookbook, SGLang's "
         "release notes), that --quantization matches the checkpoint's quantization_config, and that the weights "
         "are the model the config names", 3, after=r"params_dict\[|in load_weights\b"),
    Rule("unsupported_architecture", (r"Model architectures \[.*\] (?:are|is) not supported",
                                      r"Unsupported architectures?:", r"model with architecture \S+ is not supported",
                                      r"No attention attribute in layer",
                                      # model_loader's fallback to the Transformers class, refused (its warning
                                      # "has no SGLang implementation, falling back to ..." is not a failure)
                                      r"has no SG[Ll]ang implementation and (?:the Transformers implementation )?is "
                                      r"not compatible with SGLang",
                                      r"The Transformers implementation of \S+ is not compatible with SGLang",
                                      # the model config's check of --quantization / the checkpoint's format
                                      r"Unknown quantization method: \S+",
                                      # the fallback to Transformers for a class SGLang did not register, refused
                                      # by Transformers too
                                      r"Cannot find model module\. '\w+' is not a registered model in the "
                                      r"Transformers library"),
         "startup", "this SGLang build has no implementation of the model class or format",
         "upgrade SGLang to a version that lists the architecture", 3),
    # transformers' config check before it knew rope types beyond linear/dynamic (llama3, yarn: 4.43)
    Rule("transformers_too_old", (r"`?rope_scaling`? must be a dictionary with two fields",),
         "startup", "the installed transformers predates this config's rope_scaling (its rope type, e.g. llama3 or "
                    "yarn, is newer than the transformers that validates it)",
         "upgrade transformers (rope types beyond linear/dynamic need 4.43 or later), or the SGLang image with it", 3),
    Rule("transformers_too_old", (r"CONFIG_MAPPING\[config_dict\[\"model_type\"\]\]",
                                  r"Unrecognized model in .*Should have a `model_type` key",
                                  r"does not recognize this architecture",
                                  # SGLang imports the model's config class from transformers
                                  r"cannot import name '\w+Config' from 'transformers'"),
         "startup", "the installed transformers does not know the checkpoint's model_type",
         "upgrade transformers to the version the model card names", 3),
    # the opposite of transformers_too_old: a transformers newer than this SGLang, which now ships its own config class
    # for a model type SGLang registers itself
    Rule("dependency_version_mismatch", (r"is already used by a Transformers model",),
         "import", "the installed transformers is newer than this SGLang release: it now has its own class for a model "
                   "type SGLang registers itself, and refuses SGLang's",
         "install the transformers version this SGLang release pins (`pip show sglang` lists it), or an SGLang release "
         "made for the installed transformers", 3),
    # torchvision built against another torch: its C++ operators do not register, and the import fails on the first
    Rule("dependency_version_mismatch", (r"operator torchvision::\w+ does not exist",),
         "import", "the installed torchvision was built for another torch than the one installed: its C++ operators "
                   "did not load (SGLang imports it for multimodal models)",
         "install the torchvision release paired with the installed torch (torch 2.9 with torchvision 0.24, 2.10 "
         "with 0.25, ...), from the same index as torch", 3),
    # a module missing or without a name SGLang imports (sgl_kernel's and transformers' own cases are named below
    # and above, more specifically)
    Rule("dependency_version_mismatch", (r"with minimum required version \S+ is not installed",
                                         # the same check finding an older one (assert_pkg_version)
                                         r"is installed with version \S+, which is less than",
                                         r"cannot import name '[^']+' from '[\w.]+",  # (the module may be cut)
                                         r"ModuleNotFoundError: No module named '[\w.]+'",
                                         r"requires .* but you have .* which is incompatible"),
         "import", "a Python dependency is missing, or has another version or API than this SGLang release expects",
         "install the versions the SGLang release pins (pip install 'sglang[all]==<version>'), or the missing "
         "package", 2),
    # a shared library that is not there (its exception line only)
    Rule("dependency_version_mismatch", (r"(?:ImportError|OSError): lib[\w+.-]+\.so[\d.]*: cannot open shared "
                                         r"object file",),
         "import", "a shared library a Python package was built against is missing (an NVIDIA/CUDA library the "
                   "installed torch or kernel wheel expects)",
         "install the NVIDIA pip package that ships it for this torch's CUDA (e.g. nvidia-cudnn-cu12), or put its "
         "lib directory on LD_LIBRARY_PATH", 2),
    # an extension (a wheel, or a kernel FlashInfer compiled) built for a newer C library or C++ runtime than the one
    # the loader found: an older distribution in the container, or a conda env's own older libstdc++ shadowing it
    Rule("kernel_package_mismatch", (r"version `GLIBC(?:XX)?_[\d.]+' not found",),
         "import", "a compiled extension needs a newer C library (glibc) or C++ runtime (libstdc++) than the one this "
         "process loaded (the line names the library it found and the version it lacks)",
         "for GLIBC: run SGLang in a container whose distribution has that version (Ubuntu 22.04 has glibc 2.35), or "
         "install a build of the package made for this one; for GLIBCXX: load a newer libstdc++ (a conda env's own "
         "older copy shadows the system's: update it, e.g. conda-forge libstdcxx-ng, or remove it)", 3),
    # any other compiled extension (flash-attn, most often) built against another torch than the one installed
    Rule("kernel_package_mismatch", (r"ImportError:\s+(?!\S*sgl_kernel)\S*\.so: undefined symbol: _Z\w+",),
         "import", "a compiled extension was built against another torch (or CUDA) than the one installed: its C++ "
         "symbols do not resolve",
         "install the build of that package made for this torch and CUDA (or build it from source against them)", 3),
    Rule("kernel_package_mismatch", (r"sgl_kernel/\S*\.so: undefined symbol", r"undefined symbol: cu\w+",
                                     r"No module named 'sgl_kernel'",
                                     r"cannot import name '[^']+' from 'sgl_kernel'",
                                     r"Could not run 'sgl_kernel::",
                                     # its loader's summary when no common_ops build loads (the per-file reasons,
                                     # an undefined symbol most often, follow it)
                                     r"\[sgl_kernel\] CRITICAL: Could not load any common_ops library",
                                     # SGLang's own version check on it (assert_pkg_version)
                                     r"sgl[-_]kernel is installed with version \S+, which is less than"),
         "import", "the compiled sgl_kernel is missing, or does not match the installed torch/CUDA/driver",
         "(re)install the sgl-kernel this SGLang release pins, built for this torch and CUDA", 3),
    Rule("kernel_arch_unsupported", (r"CUDA error: invalid device function",),
         "startup", "a kernel has no code for this GPU's architecture (usually built for another compute capability)",
         "use a build for this GPU (or another backend)", 2),
    # the compiler toolchain (Triton's LLVM) not knowing the GPU's architecture: kernels cannot be built for it
    Rule("kernel_arch_unsupported", (r"'sm_\d+a?' is not a recognized processor for this target",),
         "startup", "the kernel compiler (Triton's LLVM) does not know this GPU's architecture: its build is older "
                    "than the GPU",
         "install a torch/Triton build that supports this GPU (sm_120 needs CUDA 12.8+ builds)", 3),
    # torch's own warning at import that its build has no kernels for this GPU (a Blackwell card under a pre-CUDA-12.8
    # wheel), and the attention kernel's check: the first cause of whatever CUDA error follows
    Rule("kernel_arch_unsupported", (TORCH_ARCH_WARNING,
                                     r"FATAL: kernel `\w+` is for sm\d+-sm\d+, but was built for sm"),
         "import", "the installed PyTorch was not built for this GPU's compute capability",
         "install a PyTorch (or SGLang image) whose CUDA capabilities include this GPU's: Blackwell's sm_120 needs a "
         "CUDA 12.8 or newer build; a card older than the build's oldest capability needs an older build", 3),
    Rule("kernel_arch_unsupported", (r"no kernel image is available for execution on the device",),
         "startup", "the kernels were not built for this GPU's compute capability",
         "use a build for this GPU (or another backend)", 3),
    Rule("attention_backend_unsupported", (r"Only SM 1\d\.x(?: and 1\d\.x)? (?:are|is) supported",
                                           # fa3 on Blackwell (or fa3 with MLA on Ampere)
                                           r"FlashAttention v3 Backend requires SM>=\d+ and SM<=\d+",
                                           # flash-attn 2's own check (Volta, Turing), and its older form
                                           r"FlashAttention only supports Ampere GPUs or newer",
                                           r"Expected is_sm\w+ \|\| is_sm\w+.* to be true, but got false",
                                           # fa3 on Ampere/Ada with an FP8 KV cache
                                           r"FlashAttention on Ampere/Ada cards only supports fp16 and bf16",
                                           # FlashInfer's kernels without this model's head dimension
                                           r"flashinfer/\S+: Unsupported head_dim: \d+",
                                           # SGLang's own gates: a TRT-LLM backend on a GPU other than SM100 ("...
                                           # backend for prefill is only supported on Blackwell GPUs (SM100)"), fa3
                                           # for the vision tower on Blackwell, the backends a hybrid GDN model takes
                                           # there, sgl-kernel's flash-attn below its oldest build
                                           r"backend(?: for \w+)? is only supported on \w+ GPUs \(SM\d+\)",
                                           r"The '\w+' backend is not supported on \w+ GPUs",
                                           r"backends are supported on \w+ GPUs for [\w ]+\. Got attention_backend=",
                                           r"flash_attn at sgl-kernel is only supported on sm\d+"),
         "startup", "the chosen attention backend does not support this GPU generation",
         "choose another --attention-backend (or --prefill-/--decode-attention-backend, whichever the message names; "
         "where it lists the backends this GPU takes, pick one of those): e.g. flashinfer, or triton, the portable "
         "one", 3),
    Rule("quant_unsupported_on_gpu", (r"type fp8e4nv not supported in this architecture",
                                      r"fp8e4nv data type is not supported on CUDA arch < 89",  # newer Triton
                                      r"The quantization method \S+ is not supported for the current GPU",
                                      # a compressed-tensors or Quark scheme's own check (Quark's message printed as
                                      # a tuple of its pieces before sglang#25694)
                                      r"Quantization scheme is not supported for (?:', ')?the current GPU",
                                      # torch's FP8 GEMM refusing a pre-Ada GPU (an online --quantization fp8)
                                      r"torch\._scaled_mm is only supported on CUDA devices with compute capability",
                                      # the same refusal in other loaders' words (transformers' FP8 quantizer,
                                      # FP8 kernels, TransformerEngine): FP8 needs compute capability 8.9 or 9.0
                                      r"(?i:fp8|f8e4m3\w*)\b[^.]{0,60}only supported on (?:GPUs with )?compute "
                                      r"capability",
                                      r"compute capability \d\.\d or higher required for FP8"),
         "startup", "the quantization format has no kernel on this GPU architecture (e.g. FP8 on Ampere)",
         "use a quantization this GPU supports (AWQ/GPTQ on Ampere)", 3),
    # no CUDA toolkit to build with: FlashInfer's (and other) JIT kernels need nvcc, which runtime images lack
    Rule("flashinfer_jit_error", (r"CUDA_HOME environment variable is not set", r"Could not find nvcc"),
         "startup", "a JIT kernel build (FlashInfer's, most often) needs the CUDA toolkit's nvcc, which this "
                    "environment does not have (a runtime image, or CUDA_HOME unset)",
         "install the CUDA toolkit of the torch build's CUDA version (or use a -devel image) and set CUDA_HOME "
         "(e.g. /usr/local/cuda)", 2),
    # the build's own words too: a CUDA header nvcc cannot find, nvcc's error count for a source FlashInfer generated,
    # ninja giving up, and FlashInfer's run_ninja raising (newer releases) without the subprocess frames
    Rule("flashinfer_jit_error", (r"fatal error: cu\w*\.h: No such file", r"CalledProcessError: Command '\['ninja'",
                                  r"flashinfer/jit/cpp_ext\.py", r"ninja: build stopped: subcommand failed",
                                  r"errors? detected in the compilation of \S*flashinfer",
                                  r"RuntimeError: Ninja build failed"),
         "startup", "FlashInfer's JIT build (nvcc/ninja) failed",
         "install the CUDA toolkit headers, or prebuilt kernels", 2),
    # Triton's launcher refusing a kernel config; the raise line in its compiler names it when the text is cut
    Rule("triton_out_of_resources", (r"OutOfResources: out of resource: shared\b",
                                     r"raise OutOfResources\(self\.metadata\.shared, max_shared"),
         "startup", "a Triton kernel config needs more shared memory than this GPU has (not a memory problem)",
         "use another backend or smaller kernel configs", 3),
    # the driver's own user-space libraries missing where the process runs (libcuda and NVML come with the driver,
    # not from pip): a container given the device nodes but not the libraries
    Rule("cuda_driver_too_old", (r"libcuda\.so(?:\.1)?: cannot open shared object file",
                                 r"libnvidia-ml\.so(?:\.1)?: cannot open shared object file",
                                 r"NVML Shared Library Not Found"),
         "startup", "the NVIDIA driver's user-space libraries (libcuda, libnvidia-ml) are not where this process "
                    "runs: they come with the driver, not from pip, and a container needs its own copy",
         NODE_DRIVER_LIBRARIES + ", then check `nvidia-smi` there", 3),
    # a kernel Triton compiled that the driver refuses to load: the ptxas Triton bundles targets a newer CUDA than
    # the node's driver runs
    Rule("cuda_driver_too_old", (r"Triton Error \[CUDA\]: device kernel image is invalid",),
         "startup", "the driver refused a kernel Triton compiled: the ptxas Triton bundles targets a newer CUDA than "
                    "the node's driver runs (or the kernel was built for another GPU)",
         "point TRITON_PTXAS_PATH at the ptxas of a CUDA the driver runs (e.g. /usr/local/cuda/bin/ptxas) and clear "
         "~/.triton/cache, or update the node's driver", 3),
    # CUDA error 803: the user-space driver (libcuda) is not the kernel module's version, as in a container whose
    # NVIDIA libraries were installed for another driver than the Proxmox node runs
    Rule("cuda_driver_too_old", (r"system has unsupported display driver / cuda driver combination",),
         "startup", "the user-space NVIDIA driver this process loads (libcuda) is not the version of the kernel module "
         "the node runs (CUDA error 803)",
         NODE_DRIVER_LIBRARIES + ", or point LD_LIBRARY_PATH away from a stray libcuda", 3),
    Rule("cuda_driver_too_old", (r"The NVIDIA driver on your system is too old \(found version",
                                 r"CUDA driver version is insufficient for CUDA runtime version",
                                 # CUDA error 804: a runtime newer than the host driver, without forward compatibility
                                 r"forward compatibility was attempted on non supported HW",
                                 # CUDA error 222: kernels (Triton, FlashInfer's JIT) built by a newer toolkit than
                                 # the host driver can load
                                 r"the provided PTX was compiled with an unsupported toolchain"),
         "startup", "the host driver is older than the CUDA runtime in this build",
         "update the host driver (Proxmox node) or use a build for an older CUDA", 3),
    # torch's warning when cuInit fails with CUDA's "unknown error" (it then counts zero GPUs): in an LXC container
    # most often no /dev/nvidia-uvm, whose node the node's kernel creates only once its nvidia-uvm module is loaded;
    # else a GPU the driver lost. A warning: a later error that names another cause wins
    Rule("cuda_driver_too_old", (r"CUDA initialization: CUDA unknown error",),
         "startup", "CUDA could not initialise (cuInit's 'unknown error'), so torch saw no GPU: in a container most "
                    "often /dev/nvidia-uvm is missing (the node creates it only once its nvidia-uvm module is loaded), "
                    "or the driver lost a GPU (an Xid in the node's kernel log)",
         "check `ls -l /dev/nvidia-uvm*` in the container; on the node load nvidia-uvm at boot (modules-load.d, or "
         "`nvidia-modprobe -u -c=0`) and pass /dev/nvidia-uvm and /dev/nvidia-uvm-tools into the container; then "
         "read the node's kernel log for Xid errors", 2),
    # the same family seen from inside a container: no device nodes, or user-space and kernel driver differ
    Rule("cuda_driver_too_old", (r"No accelerator \(CUDA, XPU, HPU\) is available", r"No CUDA GPUs are available",
                                 r"no CUDA-capable device is detected", r"Found no NVIDIA driver on your system",
                                 r"Failed to initialize NVML: Driver/library version mismatch",
                                 r"couldn't communicate with the NVIDIA driver"),
         "startup", "the process sees no usable NVIDIA GPU: the container lacks the GPU device nodes, or its "
                    "user-space driver does not match the host's kernel module",
         "compare `nvidia-smi` on the Proxmox node and in the container (same driver version), and check the "
         "container's /dev/nvidia* passthrough", 2),
    Rule("tp_divisibility_error", (r"assert numerator % denominator == 0",
                                   # a layer constructor's own assert, e.g. `assert self.total_num_heads % tp_size == 0`
                                   r"assert [\w.]+ % [\w.]*tp_size == 0",
                                   r"AssertionError: \d+ is not divisible by \d+",
                                   # Kimi-Linear's KDA layers check their heads themselves (a ValueError)
                                   r"num_heads \(\d+\) must be divisible by global tp_size \(\d+\)",
                                   # the same constraint in vLLM's configuration check's words
                                   r"attention heads \(\d+\) must be divisible by tensor parallel size \(\d+\)",
                                   r"(?:in|out)put size is not aligned with the quantized weight shape",
                                   r"Weight (?:in|out)put_size_per_partition = \d+ is not divisible",
                                   r"is not divisible by weight quantization block_[nk] = \d+"),
         "startup", "a model dimension is not divisible by the tensor-parallel size",
         "choose a --tp-size that divides it", 3),
    # SGLang's own words for a failed prefill->decode hand-over, and the transfer engines' under them: NIXL's
    # status codes and agent errors, Mooncake's TCP transport
    Rule("kv_transfer_error", (r"KVTransferError\(bootstrap_room=", r"Failed to get kvcache from prefill instance",
                               r"timed out after [\d.]+s in KVPoll\.WaitingForInput",
                               r"(?:Prefill|Decode) transfer failed for request",
                               r"\bNIXL_ERR_[A-Z_]+", r"nixl_agent\.cpp:\d+\] \w+: failed",
                               r"tcp_transport\.cpp:\d+\] Session::\w+ failed"),
         "runtime", "KV transfer between prefill and decode instances failed (a prefill instance that died shows on "
                    "the decode side as this same failure)",
         "read the prefill instance's own log for an earlier error; then pin the RDMA devices on both sides "
         "(--disaggregation-ib-device) and try the other engine (--disaggregation-transfer-backend mooncake|nixl) to "
         "tell the engine from the network", 3),
    # the conv state in another dtype than the model runs in: SGLang keeps it in SGLANG_MAMBA_CONV_DTYPE (bfloat16
    # unless set) whatever --dtype or the checkpoint says, and the first request's write into it fails, in the
    # causal_conv1d kernel's words or torch's (index-put across dtypes) under the conv state's own frame
    # (sglang#19773, #30178, #31719)
    Rule("mamba_cache_error", (CONV_KERNEL_LINE,), "runtime", CONV_DTYPE_FAILED, CONV_DTYPE_NEXT, 3),
    Rule("mamba_cache_error", (INDEX_PUT_LINE,),
         "runtime", CONV_DTYPE_FAILED, CONV_DTYPE_NEXT, 3, after=r"conv_states|gdn_backend\.py|causal_conv1d"),
    # a configuration the state pool refuses at startup, then its bookkeeping failing while serving
    Rule("mamba_cache_error", (r"Page size must be 1 for MambaRadixCache",
                               r"is not compatible with radix cache when using --mamba-scheduler-strategy",
                               r"mamba extra_buffer is not supported for \w+"),
         "startup", "the hybrid (mamba/linear-attention) state pool refuses this configuration", MAMBA_NEXT, 2),
    # the state pool's own failures while serving: no slot left to allocate (nothing evictable), its radix tree's
    # self-check
    Rule("mamba_cache_error", (r"AssertionError: Can not alloc mamba cache",
                               r"Mamba Radix tree sanity check failed"), "runtime", MAMBA_FAILED, MAMBA_NEXT, 3),
    # the ping-pong slots of the extra_buffer strategy (a request's working copy of its state) exhausted while a
    # request is admitted: the state pool is too small for the requests it holds plus their copies
    Rule("mamba_cache_error", (r"Not enough space for mamba ping pong idx",),
         "runtime", "the hybrid state pool had no slot left for a request's working copy (extra_buffer's ping-pong "
                    "buffer) while admitting it: the pool is too small for the requests it holds",
         "raise --mamba-full-memory-ratio (or --max-mamba-cache-size), or lower --max-running-requests", 3),
    # an assertion inside its bookkeeping: frames of the mamba radix cache (hierarchical too) and its helpers,
    # context only (what they raise decides when it has a rule)
    Rule("mamba_cache_error", (r"mamba_(?:radix_cache|component)\.py\W*line \d+", r"in _\w*mamba_radix_cache\w*"),
         "runtime", MAMBA_FAILED, MAMBA_NEXT, 1),
    Rule("mamba_cache_error", (r"MambaRadixCache", r"set_mamba_track_indices_from_reqs"),
         "runtime", MAMBA_FAILED, MAMBA_NEXT, 2),
    Rule("unsupported_feature_combination", (r"'HybridAttnBackend' object has no attribute",
                                             r"Unsupported io_backend"),
         "startup", "these flags are not implemented together for this model family", "drop one of the features", 3),
    # a speculative parameter left None (--speculative-num-steps without --speculative-eagle-topk: SGLang fills in
    # top-k only with the steps) compared or multiplied where the parameters are settled: server_args'
    # `speculative_eagle_topk > 1`, the tokenizer's reserved tokens (sglang#22895, #34361). Python prints the
    # statement just above its TypeError; the same TypeError elsewhere (a request's max_new_tokens) is not this
    Rule("speculative_decoding_error", (NONE_WITH_INT_LINE,),
         "startup", "a speculative parameter SGLang left unset (None) was compared with a number as the parameters "
                    "were settled: --speculative-num-steps given without --speculative-eagle-topk (SGLang fills in "
                    "top-k only when the steps are missing too)",
         "give --speculative-eagle-topk 1 (a chain: --speculative-num-draft-tokens then steps + 1), or drop "
         "--speculative-num-steps and let SGLang choose all three; /sglang budget flags this before the load", 3,
         after=r"\bspeculative_(?:eagle_topk|num_steps|num_draft_tokens)\b"),
    # SGLang's own checks of the speculative parameters (server_args', a draft worker's), which name them: a
    # multi-layer EAGLE draft given the auto-chosen tree of another model (sglang#36536). The hybrid state pool's
    # RuntimeError that advises fewer draft tokens is a memory failure, not this
    Rule("speculative_decoding_error", (r"(?:AssertionError|ValueError): .*(?:\bspeculative_(?:num_steps|eagle_topk|"
                                        r"num_draft_tokens)\b|--speculative-(?:num-steps|eagle-topk|num-draft-tokens)"
                                        r"\b|multi-layer EAGLE requires)",),
         "startup", "SGLang refused the speculative parameters (steps, top-k, draft tokens) for this draft",
         "set --speculative-num-steps, --speculative-eagle-topk and --speculative-num-draft-tokens together as the "
         "message asks (a chain: top-k 1 and steps + 1 draft tokens), or launch without --speculative-algorithm", 3),
    # the draft SGLang built cannot take the target's embeddings / lm_head (the draft worker shares them): a
    # checkpoint that is no draft for this algorithm (EAGLE3 with no --speculative-draft-model-path takes the target
    # itself, sglang#36528), or a model class of this SGLang without the sharing speculative decoding needs
    Rule("speculative_decoding_error", (r"object has no attribute 'set_embed(?:_and_head)?'",),
         "startup", "the speculative draft could not take the target's embeddings/lm_head: the draft checkpoint is "
                    "not a draft for this algorithm, or this SGLang's class for the model lacks that sharing",
         "pass --speculative-draft-model-path a draft trained for this target and algorithm (EAGLE3 needs an EAGLE3 "
         "draft; without the flag SGLang takes the target itself as the draft); if the draft is right, launch "
         "without --speculative-algorithm, or with an SGLang release that supports speculation for this model", 3),
    # frames of the draft worker being built (by class, or through the algorithm's factory in newer releases) and
    # of any module of SGLang's speculative package (eagle_worker_v2.py, eagle_info.py, multi_layer_eagle_worker.py)
    Rule("speculative_decoding_error", (DRAFT_WORKER_FRAME, r"eagle_worker\.py", r"sglang/srt/speculative/\w+\.py\"",
                                        # a draft model's own module (llama_eagle3.py, deepseek_nextn.py, mimo_mtp.py)
                                        r"sglang/srt/models/\w*(?:eagle|nextn|_mtp)\w*\.py\"",
                                        r"forward_batch_speculative_generation", r"capture_aux_hidden_states",
                                        r"cannot generate MTP seed"),
         "startup", "the failure is in the speculative (EAGLE/MTP) draft or verify path",
         "launch once without --speculative-algorithm to confirm, then check the draft model", 1),
    # the compiler's own exception names torch.compile; an exception it wraps (an OOM) still wins
    Rule("torch_compile_error", (r"torch\._dynamo\.exc\.[A-Z]\w+",  # BackendCompilerFailed, Unsupported, ...
                                 r"torch\._inductor\.exc\.(?:InductorError|CppCompileError)",
                                 # inductor's runtime logging a kernel it generated (triton_poi/red/per_fused...)
                                 # that Triton could not compile
                                 r"triton_heuristics\.py:\d+\] Triton compilation failed: triton_"),
         "startup", "--enable-torch-compile (dynamo/inductor) failed", "launch without --enable-torch-compile", 2),
    # traceback frames only: healthy compiles print UserWarnings from the same files
    Rule("torch_compile_error", (r'File "[^"]*torch/_dynamo/', r'File "[^"]*torch/_inductor/compile_fx\.py"',
                                 r'File "/tmp/torchinductor_', r"^from user code:"),
         "startup", "--enable-torch-compile (dynamo/inductor) failed", "launch without --enable-torch-compile", 1),
    # the piecewise runner's own message: SGLang logs it with the exception, whose own rule (an OOM, NCCL) still decides
    Rule("cuda_graph_capture_error", (PIECEWISE_WRAPPER, r"add --disable-piecewise-cuda-graph to your launch command"),
         "startup", "piecewise CUDA-graph capture (the prefill graphs torch.compile traces) failed",
         "launch with --disable-piecewise-cuda-graph, as SGLang's message says; if it starts, report the failure "
         "with the model and flags", 2),
    Rule("cuda_graph_capture_error", (r"operation not permitted when stream is capturing",
                                      r"Cannot call CUDAGeneratorImpl::current_seed during CUDA graph capture",
                                      # a capture that an earlier operation invalidated (CUDA error 901), and
                                      # torch's check of the capture's status
                                      r"operation failed due to a previous error during capture",
                                      r"cudaStreamCaptureStatusInvalidated",
                                      CAPTURE_WRAPPER),
         "startup", "CUDA-graph capture failed for a reason other than memory",
         "launch with --disable-cuda-graph to confirm, then lower --cuda-graph-max-bs", 1),
    # an exception's own text: it outranks the frames it was raised through (a draft worker's, a compiled graph's);
    # what was happening when it was raised decides between loading, capture and serving
    Rule("weight_load_oom", (OOM_TEXT,), "startup",
         "the GPU ran out of memory while building or loading the model weights",
         "free the GPUs, raise --tp-size, or use a smaller/quantized checkpoint", 2),
    # the parent's words for a child that died: the SIGQUIT handler, the launcher finding a scheduler dead before it
    # was ready (then "Exit code: N"), and newer releases' subprocess watchdog
    Rule(ECHO, (r"Received sigquit from a child proces", r"SIGQUIT received\. signum=None", SCHEDULER_DEAD_LINE,
                CHILD_CRASHED_LINE, r"Failed to initialize scheduler rank \d+"),
         "startup", "a child process (scheduler/detokenizer) died; this line is the parent's echo of it",
         "find the child's own traceback (often just before or after this line)", 0),
)
# the rule whose words a finding inferred from context (a log that stops, a wrapper's tail) uses: a label's last rule,
# its general one (the narrower wordings of a label are listed before it)
RULE_BY_LABEL = {r.label: r for r in RULES}

# In a traceback cut before its exception line, these frames name the step that failed, not a path a failure
# merely passes through: the speculative draft worker being built, the model class being looked up for the
# checkpoint's architecture, a weight tensor being allocated, inductor writing a graph's code. The deepest one
# decides. Frames that unrelated failures run through too (a verify step while serving, a compiled graph running)
# stay a lead, never a finding.
_CUT_SITES: tuple[tuple[str, re.Pattern[str], str], ...] = tuple((label, re.compile(pattern), site)
                                                                   for label, pattern, site in (
    ("speculative_decoding_error", DRAFT_WORKER_FRAME, "building the speculative draft worker"),
    ("unsupported_architecture", r"\b(?:get_model_cls_by_arch_name|resolve_model_cls|get_model_architecture)\(|"
                                 r", in (?:get_model_cls_by_arch_name|resolve_model_cls|_?get_model_architecture)$",
     "looking up the model class for the checkpoint's architecture"),
    ("weight_load_oom", r"Parameter\(\s*torch\.empty\(", "allocating a weight tensor on the GPU"),
    # inductor's code generation and the loading of the module it wrote: compile time, not a compiled graph running
    ("torch_compile_error", r", in (?:compile_fx_inner|fx_codegen_and_compile|codegen_and_compile|compile_to_module|"
                            r"compile_to_fn|load_by_key_path)$", "torch.compile generated and loaded a graph's code"),
))
_COMPILED = [(r, r.compiled()) for r in RULES]
Hit = tuple[int, Rule, int]  # (position in time order, the rule that matched, index of the line in the file)

_TIMESTAMP = re.compile(r"(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2})")
_OOM = re.compile(OOM_TEXT)
_LOAD_CONTEXT = re.compile(r"load_model|get_model|create_weights|load_weights|Loading safetensors|loading shards|"
                           r"Load weight begin|weight_utils")
_CAPTURE_WRAPPER = re.compile(f"{CAPTURE_WRAPPER}|{PIECEWISE_WRAPPER}")
_CAPTURE_CONTEXT = re.compile(rf"{CAPTURE_LINE}|cuda_graph_runner|capture_one_batch|CudaGraphRunner")
_RUNTIME_CONTEXT = re.compile(r"forward_decode|forward_extend|event_loop|process_batch|run_batch|Decode batch")
# SGLang's life-cycle lines (bot.core.startup_log), shared by the phase of a finding and the diagnosis of a
# stalled log
# SGLang's warning when its custom all-reduce cannot be set up (no P2P between the GPUs, an IPC handle refused, a
# device id it cannot read): it falls back to NCCL and goes on, so what the line quotes is never the cause
CUSTOM_AR_FALLBACK = r"Setup Custom allreduce failed with "
_FALLBACK = re.compile(CUSTOM_AR_FALLBACK)
_BENIGN = re.compile(f"{BENIGN_NOTICE}|{CUSTOM_AR_FALLBACK}")  # lines that report no error of the launch's
# that notice for a model module (older releases end its name with "." rather than ":")
_SKIPPED_MODEL = re.compile(BENIGN_NOTICE + r"sglang\.srt\.models\.(?P<module>\w+)[.:] (?P<reason>.+)")
_ARCHITECTURE = re.compile(r"\b(?P<name>[A-Z][A-Za-z0-9_]*?)_?(?:For[A-Z]\w*|Model)\b")
_POOL_LINE = r"KV Cache is allocated|Memory pool end|Mamba Cache is allocated"
_WEIGHTS_LINE = r"Load weight begin|Loading safetensors checkpoint shards"
_INIT_LINE = r"Init torch distributed begin"
_READY = re.compile(READY_LINE)
# where in the server's life a line sits: the last marker at or before the cause decides the phase
_PHASE_MARKERS = (
    # the warmup request is the last step of start-up, though it is served like any request
    (re.compile(r"Initialization failed\. warmup error"), "startup"),
    (re.compile(rf"{READY_LINE}|(?:Decode|Prefill) batch[.,]|\bPOST /(?:v1/|generate)"), "runtime"),
    (re.compile(rf"{CAPTURE_LINE} (?:begin|failed)|{CAPTURE_BAR}|{COMPILE_BAR}"), "startup: CUDA graphs"),
    # the scheduler's constructor building its pools and cache (a traceback's frames)
    (re.compile(rf"{_POOL_LINE}|{LOAD_END_LINE}|line \d+, in init_(?:cache_with_)?memory_pool\b"),
     "startup: KV pool"),
    (re.compile(_WEIGHTS_LINE), "startup: weights"),
    (re.compile(rf"{_INIT_LINE}|server_args=ServerArgs"), "startup: init"),
)
# where a log that just stops was: (marker, what had happened, what stopping there means, label), furthest first
_STAGES = (
    (re.compile(SCHEDULER_LINE), "the scheduler started (pools and graphs done)",
     "stopped before the server said it was ready: the warm-up request or the HTTP server", "unknown"),
    (re.compile(rf"{CAPTURE_LINE} end"), "CUDA graph capture ended",
     "stopped before the scheduler started (a hang, or the process killed without a word: check dmesg)", "unknown"),
    (re.compile(rf"{CAPTURE_LINE} begin|{CAPTURE_BAR}"), "CUDA graph capture began", "a hang at capture",
     "cuda_graph_capture_error"),
    (re.compile(COMPILE_BAR), "piecewise CUDA graph compilation began",
     "a hang while compiling piecewise CUDA graphs", "cuda_graph_capture_error"),
    (re.compile(_POOL_LINE), "the memory pools were allocated",
     "stopped before CUDA graph capture began (a hang, or the process killed without a word: check dmesg)",
     "unknown"),
    (re.compile(LOAD_END_LINE), "the weights loaded",
     "stopped while the memory pools were sized (a hang, or the process killed without a word: check dmesg)",
     "unknown"),
    (re.compile(_WEIGHTS_LINE), "weight loading began", "a hang while loading weights", "unknown"),
    (re.compile(r"Init COMPLETE|Custom allreduce is disabled because this process group spans across nodes|"
                rf"{_INIT_LINE}|NCCL INFO "), "distributed init began", "a hang at distributed init (rendezvous)",
     "dist_init_timeout"),
)


@dataclass(frozen=True)
class LaunchContext:
    """What the triage knows about the launch besides its log: from the attempt's own argv and checkpoint, and how
    its log fell silent (still running, or stopped on request) against the silence the follower calls a hang."""

    speculative: bool = False
    hybrid_linear: bool = False  # a model with recurrent state (GDN, Mamba-2, ...): SGLang's mamba state pool
    model_types: tuple[str, ...] = ()  # the checkpoint's config.json model_type (and its text_config's)
    # how a silent log is read (``stalled_minutes``): the silence gpuops' follower calls a hang (None: any silence
    # is read as one), and whether the silence ended in a stop on request rather than lasting until now
    hang_after_minutes: float | None = None
    stopped_on_request: bool = False

    @classmethod
    def from_argv(cls, argv: Sequence[str], model_type: str | Sequence[str] | None = None,
                  recurrent: bool = False) -> LaunchContext:
        """``recurrent``: the checkpoint's config describes recurrent state (model.holds_recurrent_state); the
        launch's flags and model path, and its model_type, say so too for the Qwen hybrids."""
        text = " ".join(argv)
        types = (model_type,) if isinstance(model_type, str) else tuple(model_type or ())
        return cls(
            speculative=bool(re.search(r"--speculative-algo\S*\s+\S+|\b(?:EAGLE3?|NEXTN|MTP)\b", text)),
            hybrid_linear=recurrent or bool(re.search(r"--mamba-|Qwen3(?:[.-]?(?:5|6|Next)|\.[7-9])", text, re.I))
            or any(t.startswith(("qwen3_next", "qwen3_5")) for t in types),
            model_types=tuple(t for t in types if t),
        )


# failures whose visible symptom is generic, but whose usual cause is the launch's feature
_CONTEXT_RULES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    # shape mismatches between the draft's tensors and the target's (torch's two wordings), an index past the draft's
    ("speculative", re.compile(r"index out of bounds|must match the size of tensor|Sizes of tensors must match"),
     "speculative_decoding_error"),
    ("hybrid_linear", re.compile(r"TypeError: 'NoneType' object cannot be interpreted as an integer"),
     "mamba_cache_error"),
)
# what NCCL's own last error says when it is GPU memory, not a transport; and a line naming its shared-memory transport
NCCL_OOM_LINE = r"Cuda failure 2 'out of memory'|Failed to CUDA calloc"
NCCL_SHM_LINE = r"shared memory|/dev/shm|posix_fallocate|\bSHM\b"
_NCCL_OOM = re.compile(NCCL_OOM_LINE)
_TOKEN_USAGE = re.compile(r"(?:Decode|Prefill) batch[.,].*?token usage: (?P<usage>[\d.]+)")
# the scheduler giving running requests back to the queue because the token pool is full: older releases' "Decode out
# of memory happened.", newer "KV cache pool is full. Retract requests." (then the counts)
_RETRACTED = re.compile(r"(?:Decode out of memory happened|KV cache pool is full\. Retract requests)\. #retracted_reqs")
_TINY_AVAIL = re.compile(r"Load weight end\..*avail mem=(?P<avail>[\d.]+) GB, mem usage=(?P<usage>[\d.]+) GB")


@dataclass(frozen=True)
class Evidence:
    line_no: int  # 1-based, in the file as given
    text: str  # as shown to people: secret values (an --api-key in the printed ServerArgs) are redacted

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", scrub_secrets(self.text))


@dataclass(frozen=True)
class Finding:
    label: str
    phase: str
    confidence: str  # high | medium | low
    explanation: str
    next_step: str
    evidence: tuple[Evidence, ...]
    also_seen: tuple[str, ...] = ()  # other labels in the text (echoes, consequences)
    notes: tuple[str, ...] = field(default=())
    oom: TorchOom | None = None  # torch's out-of-memory report at the cause, when the cause is one


def time_order(lines: list[str], collected: list[str] | None = None) -> tuple[list[int], bool]:
    """Indexes of ``lines`` in time order; True when the export was newest-first. ``collected``: the same lines
    with their collector's prefixes, whose timestamps (docker's, kubectl's) are read first."""
    stamps = [(i, m.group(1)) for i, line in enumerate(lines)
              if (m := _TIMESTAMP.search((collected[i] if collected else "")[:60]) or _TIMESTAMP.search(line[:60]))]
    if len(stamps) >= 3:
        down = sum(1 for (_, a), (_, b) in zip(stamps, stamps[1:], strict=False) if b < a)
        up = sum(1 for (_, a), (_, b) in zip(stamps, stamps[1:], strict=False) if b > a)
        if down > up and down >= 2:
            return list(range(len(lines) - 1, -1, -1)), True
    return list(range(len(lines))), False


def _oom_label(lines: list[str], order: list[int], position: int) -> str:
    """CUDA OOM: its label comes from what was happening (loading, capture, serving), or from a capture wrapper that
    re-raises this same out-of-memory later (an excerpt can start below the frames that show the capture)."""
    window = [lines[order[j]] for j in range(max(0, position - 40), position + 1)]
    text = "\n".join(window)
    if _CAPTURE_CONTEXT.search(text) or _rewrapped_by_capture(lines, order, position):
        return "cuda_graph_oom"
    if _RUNTIME_CONTEXT.search(text) and not _LOAD_CONTEXT.search(text):
        return "runtime_oom"
    return "weight_load_oom"


_TRIED = re.compile(r"Tried to allocate (\d+(?:\.\d+)? [KMGT]?i?B)")


def _rewrapped_by_capture(lines: list[str], order: list[int], position: int) -> bool:
    """A capture wrapper below this out-of-memory quotes the same allocation ("Tried to allocate 1.50 GiB"): the
    same failure, re-raised by the capture (a different size is another failure, such as a later restart's)."""
    tried = _TRIED.search(lines[order[position]])
    if tried is None:
        return False
    for j in range(position + 1, min(len(order), position + 120)):
        line = lines[order[j]]
        if (wrapper := _CAPTURE_WRAPPER.search(line)) and (again := _TRIED.search(line[wrapper.end():])):
            return again.group(1) == tried.group(1)
    return False


def _wrapper_label(tail: str) -> str:
    if _OOM.search(tail):
        return "cuda_graph_oom"
    if re.search(r"gloo|Connection cl", tail):
        return "distributed_comm_error"
    if re.search(r"sgl_kernel", tail):
        return "kernel_package_mismatch"
    for rule, patterns in _COMPILED:
        if rule.strength >= 2 and any(p.search(tail) for p in patterns):
            return rule.label
    return "cuda_graph_capture_error"


def cause_line(finding: Finding) -> str | None:
    """The line a failed launch's card and history show as its first error, when the whole log's reading names a
    cause with some confidence: the cause's first evidence line (the first line that merely says `Error` can be an
    echo, as the scheduler's TypeError after a context longer than the KV pool is), or the OOM killer's kill, which
    the log has no line of. None: the log's first error line stands."""
    if finding.label == HOST_OOM_KILL:
        return finding.explanation
    if finding.label in NOT_A_CAUSE or finding.label == ECHO or finding.confidence == "low":
        return None
    # a frame or the code that raised says where, not what: the exception's own line does
    said = [e.text for e in finding.evidence if not e.text.lstrip().startswith(('File "', "raise "))]
    return said[0] if said else None


def diagnose_excerpt(excerpt: LogExcerpt, *, stalled_minutes: float | None = None,
                     context: LaunchContext | None = None) -> Finding:
    """``diagnose`` over what ``argv.log_excerpt`` read of a long log: line numbers as in the file, and a
    note of what was skipped."""
    finding = diagnose(excerpt.text, stalled_minutes=stalled_minutes, context=context)
    if excerpt.mark_line is None:
        return finding
    return replace(finding, evidence=tuple(replace(e, line_no=excerpt.file_line(e.line_no)) for e in finding.evidence),
                   notes=(*finding.notes, f"a long log: read its first {LOG_HEAD_BYTES // 1024} KiB and last "
                          f"{LOG_TAIL_BYTES // 1024} KiB, skipping {excerpt.skipped_bytes:,} bytes between them"))


def diagnose(text: str, *, stalled_minutes: float | None = None, context: LaunchContext | None = None) -> Finding:
    """The first cause in a log (``stalled_minutes``: how long since the log last grew, if known;
    ``context``: what the launch was, which decides between causes the log alone cannot).

    A log that names no cause (or only a weak one) as given is read again with the lines a terminal hard-wrapped
    rejoined (``log_lines.unwrapped``); that reading is taken when it names a stronger cause, its evidence numbered
    by the lines of the text as given."""
    raw = collected_lines(text)
    finding = _diagnose_lines(raw, stalled_minutes, context)
    weak = NOT_A_CAUSE | {ECHO}
    if finding.label not in weak and finding.confidence != "low":
        return finding
    rejoined = unwrapped(raw)
    if rejoined is None:
        return finding
    lines, starts, width = rejoined
    again = _diagnose_lines(lines, stalled_minutes, context)
    if again.label in weak or (again.confidence == "low" and finding.label not in weak):
        return finding
    return replace(again, evidence=tuple(replace(e, line_no=starts[e.line_no - 1] + 1) for e in again.evidence),
                   notes=(*again.notes, f"the log's lines were cut at {width} columns (a terminal's copy): read "
                                        "with them rejoined"))


def _diagnose_lines(raw: list[str], stalled_minutes: float | None, context: LaunchContext | None) -> Finding:
    lines = plain_lines(raw)
    finding = _first_cause(lines, raw, stalled_minutes, context)
    fallback = next((i for i, line in enumerate(lines) if _FALLBACK.search(line)), None)
    if fallback is None:
        return finding
    return replace(finding, notes=(*finding.notes, (
        f"line {fallback + 1}: SGLang could not set up its custom all-reduce and fell back to NCCL (a warning, not "
        "the cause: all-reduce is slower between GPUs without P2P; --disable-custom-all-reduce silences it)")))


def _first_cause(lines: list[str], raw: list[str], stalled_minutes: float | None,
                 context: LaunchContext | None) -> Finding:
    order, reversed_export = time_order(lines, [strip_ansi(x) for x in raw])
    hits = _rule_hits(lines, order)
    notes = ("log was exported newest-first; read in time order",) if reversed_export else ()
    if context is not None:
        hits = _with_context(hits, lines, order, context)
    causes = [h for h in hits if h[1].label != ECHO]
    if causes:
        strongest = max(h[1].strength for h in causes)
        # the earliest of the most specific kind of evidence: frames and wrappers only decide
        # when no exception text names a cause
        chosen = min((h for h in causes if h[1].strength == strongest), key=lambda h: h[0])
        rule = chosen[1]
        if rule.strength <= 1 and _cut_inside_traceback(lines, order):
            if (imported := _import_failure(lines, order, notes)) is not None:
                return imported
            if (site := _cut_site(lines, order, notes, {h[1].label for h in hits})) is not None:
                return site
            frames = tuple(sorted({h[1].label for h in causes}))
            cut = _cut_traceback(lines, order, notes)
            return replace(cut or _unknown(lines, order, notes), explanation=(
                "the log is cut inside a traceback, before its exception line; the frames pass through "
                + ", ".join(frames)), also_seen=frames, next_step=(
                "find the rest of this log (it was cut: rotated, truncated, or the process was killed mid-write); "
                f"to test the frames' lead meanwhile: {rule.next_step}"))
        return _cause_finding(chosen, causes, hits, lines, order, notes)
    for index in order:  # weak signal: weights left almost nothing free
        m = _TINY_AVAIL.search(lines[index])
        if m and float(m.group("avail")) < 0.2 * (float(m.group("avail")) + float(m.group("usage"))):
            rule = RULE_BY_LABEL["kv_pool_oom"]
            return Finding("kv_pool_oom", "startup", "low", rule.explanation + " (inferred: the log stops after a "
                           f"weight load that left only {m.group('avail')} GB free)", rule.next_step,
                           (Evidence(index + 1, lines[index].strip()[:400]),), (), notes)
    if (imported := _import_failure(lines, order, notes)) is not None:
        return imported
    if (site := _cut_site(lines, order, notes, {h[1].label for h in hits})) is not None:
        return site
    if (cut := _cut_traceback(lines, order, notes)) is not None:
        return cut
    full_pool = _full_pool_at_the_end(lines, order)
    if full_pool is not None:
        index, usage = full_pool
        rule = RULE_BY_LABEL["runtime_oom"]
        return Finding("runtime_oom", "runtime", "low", rule.explanation + f" (inferred: the log stops while "
                       f"serving with the token pool {usage:.0%} full; the out-of-memory line itself is not in "
                       "this text)", rule.next_step, (Evidence(index + 1, lines[index].strip()[:400]),), (), notes)
    echoes = [h for h in hits if h[1].label == ECHO]
    # a log that ends in a raised exception stopped because of it, whatever stage it had reached
    if (stalled_minutes is not None or not echoes) and not _ends_in_exception(lines, order):
        stalled = _stall(lines, order, stalled_minutes, context or LaunchContext())
        if stalled is not None:
            return stalled
    if echoes:
        # the child's own traceback before the parent's word, with no rule for it: that exception is quoted (the
        # teardown's tracebacks after the word are the echo's)
        before = order[:min(h[0] for h in echoes)]
        if not _ends_in_exception(lines, before):
            return _echo_finding(echoes, lines, order, notes)
        found = _unknown(lines, before, notes)
        return replace(found, also_seen=(ECHO,), explanation=found.explanation + (
            "; the parent's word that a child died follows it (its echo)"))
    return _no_failure(lines, order, notes) or _launch_would_decide(_unknown(lines, order, notes), lines, order,
                                                                    context)


_FEATURE_WORDS = {"speculative": "speculative decoding (--speculative-algorithm)",
                  "hybrid_linear": "a model with recurrent state (Qwen3-Next/3.5/3.6, Nemotron-H, ...)"}


def _launch_would_decide(found: Finding, lines: list[str], order: list[int], context: LaunchContext | None) -> Finding:
    """An unknown whose lines are a generic symptom that the launch decides (_CONTEXT_RULES), read without the
    launch: say which launch would make it which cause, and to give the launch command."""
    if context is not None:
        return found
    decides = [f"with {_FEATURE_WORDS[feature]} it points to {label}" for feature, pattern, label in _CONTEXT_RULES
               if any(pattern.search(lines[i]) for i in order)]
    if not decides:
        return found
    return replace(found, next_step="this is a generic symptom that the launch decides: " + "; ".join(decides)
                   + ". Give the launch's command (gpuops triage --launch \"...\"; /sglang triage reads the attempt's "
                   "own) to read it in that light")


def _rule_hits(lines: list[str], order: list[int]) -> list[Hit]:
    """Every line's matching rules, in time order: a capture wrapper is named by what follows it, an
    out-of-memory by what was happening when it struck."""
    hits: list[Hit] = []
    for position, index in enumerate(order):
        line = lines[index]
        if not line.strip() or _BENIGN.search(line):
            continue
        for rule, patterns in _COMPILED:
            if any(p.search(line) for p in patterns):
                if rule.after and not any(re.search(rule.after, lines[order[j]])
                                          for j in range(max(0, position - 4), position)):
                    continue
                if rule.label == "cuda_graph_capture_error" and (wrapper := _CAPTURE_WRAPPER.search(line)):
                    tail = " ".join([line[wrapper.end():], *(lines[order[j]] for j in
                                                             range(position + 1, min(len(order), position + 4)))])
                    named = _wrapper_label(tail)  # no rule in the tail: the wrapper's own rule names it
                    hits.append((position, rule if named == rule.label else RULE_BY_LABEL[named], index))
                elif rule.label == "weight_load_oom":
                    hits.append((position, RULE_BY_LABEL[_oom_label(lines, order, position)], index))
                else:
                    hits.append((position, rule, index))
    return hits


def _cause_finding(chosen: Hit, causes: list[Hit], hits: list[Hit], lines: list[str], order: list[int],
                   notes: tuple[str, ...]) -> Finding:
    """The finding for the rule chosen as the first cause: its lines (one per line, up to three), the other labels
    seen, and what its context refines (NCCL out of memory, the unbalanced GPU, torch's own OOM report)."""
    rule = chosen[1]
    same = list({h[2]: h for h in causes if h[1].label == rule.label}.values())  # one per line
    evidence = tuple(Evidence(h[2] + 1, lines[h[2]].strip()[:400]) for h in same[:3])
    also = tuple(sorted({h[1].label for h in hits if h[1].label != rule.label}))
    confidence = "high" if rule.strength >= 3 else "medium" if rule.strength == 2 else "low"
    phase = _phase(lines, order, chosen[0], rule.phase)
    explanation, next_step = rule.explanation, rule.next_step
    nccl_oom = next((i for i in order[chosen[0]:] if _NCCL_OOM.search(lines[i])), None)
    if rule.label == "nccl_error" and nccl_oom is not None:
        explanation = ("NCCL could not allocate its buffers: its own last error is a CUDA out-of-memory "
                       "(they live outside the static pool that --mem-fraction-static sizes)")
        next_step = "leave NCCL room: lower --mem-fraction-static by a few hundredths, or free the GPU first"
        evidence = (*evidence[:2], Evidence(nccl_oom + 1, lines[nccl_oom].strip()[:400]))  # the line that says so
    elif rule.label == "nccl_error" and any(re.search(NCCL_SHM_LINE, e.text) for e in evidence):
        explanation = "NCCL could not make its shared-memory segment in /dev/shm (too small or full there)"
        next_step = ("give the container's /dev/shm room for NCCL's segments (`df -h /dev/shm` there), or relaunch "
                     "with NCCL_SHM_DISABLE=1 to confirm it")
    if rule.label == OCCUPIED and (free := _UNBALANCED.search(lines[chosen[2]])):
        explanation += (f" (one GPU had only {free.group('least')} GB free against {free.group('here')} GB on "
                        "this rank's)")
    if rule.label == "kernel_arch_unsupported" and (gpu := re.search(TORCH_ARCH_WARNING, lines[chosen[2]])):
        built = next((m for i in order[chosen[0]:chosen[0] + 3] if (m := _TORCH_ARCHES.search(lines[i]))), None)
        explanation += f": the GPU is {gpu.group('sm')}" + (
            f", the build supports {built.group('arches').strip()}" if built else "")
    if rule.label == "unsupported_architecture" and (skipped := _skipped_models(lines, order, chosen)):
        index, module, reason = skipped[0]
        reason = reason.strip()
        if len(reason) > 160:  # a compiler's whole command line, say: its start and how it ended
            reason = f"{reason[:100]} ... {reason[-50:]}"
        more = f" (and {len(skipped) - 1} more like it)" if len(skipped) > 1 else ""
        explanation += (f"; but SGLang's model registry skipped the model module {module}{more} because its import "
                        f"failed ({reason}): a class SGLang implements is missing when its module fails to import, so "
                        "that import error may be the cause")
        next_step = ("fix the import error the registry's line names (a missing package, or a transformers, "
                     "sgl_kernel or triton this SGLang does not match), then launch again; " + next_step
                     + " only if the model's own module is not among those skipped")
        if index + 1 not in {e.line_no for e in evidence}:
            evidence = (*evidence, Evidence(index + 1, lines[index].strip()[:400]))
    if (oom := torch_oom(lines, order, chosen[0])) is not None:
        notes = (*notes, _torch_oom_note(oom))
    if rule.label == "torch_compile_error" and any(_OOM.search(lines[i]) for i in order[chosen[0]:]):
        explanation = "torch.compile ran out of GPU memory while compiling (the compiler's error wraps a CUDA OOM)"
        next_step = ("lower --torch-compile-max-bs or --mem-fraction-static (compiling needs room outside the "
                     "static pool), or launch without --enable-torch-compile")
    return Finding(rule.label, phase, confidence, explanation, next_step, evidence, also, notes, oom)


def _skipped_models(lines: list[str], order: list[int], chosen: Hit) -> list[tuple[int, str, str]]:
    """(line index, module, reason) of the model modules SGLang's registry skipped before the cause (their import
    failed) whose names begin like the refused architecture's (deepseek_v2 holds DeepseekV3ForCausalLM), closest
    first. Healthy logs skip unrelated modules too (glm_ocr on an older transformers): those are not named."""
    named = _ARCHITECTURE.search(lines[chosen[2]])
    wanted = re.sub(r"[^a-z0-9]", "", named.group("name").lower()) if named else ""
    found: dict[str, tuple[int, tuple[int, str, str]]] = {}
    for index in order[:chosen[0]]:
        if (m := _SKIPPED_MODEL.search(lines[index])) is None or m.group("module") in found:
            continue
        key = m.group("module").replace("_", "")
        shared = next((n for n, (a, b) in enumerate(zip(key, wanted, strict=False)) if a != b),
                      min(len(key), len(wanted)))
        if shared >= 4:
            found[m.group("module")] = (shared, (index, m.group("module"), m.group("reason")))
    return [item for _, item in sorted(found.values(), key=lambda x: -x[0])]


def _echo_finding(echoes: list[Hit], lines: list[str], order: list[int], notes: tuple[str, ...]) -> Finding:
    """Only a parent's word that a child died: said as that, with the exit code read when the log has it."""
    rule = RULE_BY_LABEL[ECHO]
    evidence = tuple(Evidence(h[2] + 1, lines[h[2]].strip()[:400]) for h in echoes[:2])
    exit_line = child_exit(lines, order)
    explanation = rule.explanation + "; the child's own error is not in this text"
    next_step = rule.next_step
    if exit_line is not None:
        index, child, code = exit_line
        explanation += f"; {child} exited with code {code}: {exit_meaning(code)}"
        if index + 1 not in {e.line_no for e in evidence}:
            evidence = (*evidence, Evidence(index + 1, lines[index].strip()[:400]))
        if code == -9:
            next_step = ("read the node's kernel log for the OOM killer (`journalctl -k | grep -i 'killed "
                         "process'`): a container's memory limit or the node's RAM; then " + next_step)
    return Finding(ECHO, rule.phase, "low", explanation, next_step, evidence, (), notes)


# how a parent reports its child's end: the watchdog's line, or the launcher's "Exit code: N" after "Rank N scheduler is
# dead" (a negative code is the signal that ended it)
_CHILD_CRASHED = re.compile(CHILD_CRASHED_LINE)
_SCHEDULER_DEAD = re.compile(SCHEDULER_DEAD_LINE)
_EXIT_CODE = re.compile(r"\bExit code: (?P<code>-?\d+)\s*$")
_SIGNALS = {
    -9: "SIGKILL, which nothing inside the process sends: most often the kernel's OOM killer (the container's memory "
        "limit or the node's RAM, often while the weights pass through host memory), else someone's kill -9",
    -11: "SIGSEGV, a segmentation fault in native code (a CUDA, NCCL or Triton library, the driver, a compiled "
         "extension): no Python traceback is printed for it",
    -6: "SIGABRT, an abort in native code (a C++ check or an uncaught C++ exception in a CUDA, NCCL or kernel library)",
    -7: "SIGBUS, a bus error: in a container most often a /dev/shm too small for the shared memory mapped there",
    -15: "SIGTERM, a stop from outside (someone's stop, or the container shutting down)",
    -3: "SIGQUIT, SGLang's own teardown after a failure in that process: its error, earlier in the full log, is the "
        "cause",
}


def exit_meaning(code: int) -> str:
    """What a child's exit code says (multiprocessing gives a signal's death as its negative number)."""
    if code in _SIGNALS:
        return _SIGNALS[code]
    if code < 0:
        return f"ended by signal {-code}"
    return "a Python error ended it: its traceback, earlier in the full log, is the cause"


def child_exit(lines: list[str], order: list[int]) -> tuple[int, str, int] | None:
    """The first child end the parent reported with its exit code: (file index, which child, code)."""
    dead_rank: str | None = None
    for index in order:
        line = lines[index]
        if (crashed := _CHILD_CRASHED.search(line)) is not None:
            return index, crashed.group("child"), int(crashed.group("code"))
        if (dead := _SCHEDULER_DEAD.search(line)) is not None:
            dead_rank = dead.group("rank")
        elif dead_rank is not None and (code := _EXIT_CODE.search(line)) is not None:
            return index, f"the rank {dead_rank} scheduler", int(code.group("code"))
    return None


# SGLang's balance check names the least free memory over the ranks and this rank's own (GB), across versions
_UNBALANCED = re.compile(r"(?:min_per_gpu_memory|pre_model_load_memory|min_available_device_memory)=(?P<least>[\d.]+)"
                         r".*?local_(?:gpu|device)_memory=(?P<here>[\d.]+)")
# torch's CUDA out-of-memory message (torch >= 2.1) sizes the GPU and lists each process holding memory on it
_SIZE = r"[\d.]+ (?:[KMG]iB|bytes)"
_TORCH_OOM = re.compile(rf"Tried to allocate (?P<tried>{_SIZE})\. GPU (?P<gpu>\d+) has a total capacity of "
                        rf"(?P<total>{_SIZE}) of which (?P<free>{_SIZE}) is free\.")
_HOLDER = re.compile(rf"Process (?P<pid>\d+) has (?P<size>{_SIZE}) memory in use")
_THIS_PROCESS = re.compile(rf"this process has (?P<size>{_SIZE}) memory in use")
_UNITS = {"bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def size_bytes(size: str) -> float:
    """torch's printed size ("78.37 GiB", "0 bytes") in bytes."""
    number, unit = size.split()
    return float(number) * _UNITS[unit]


@dataclass(frozen=True)
class TorchOom:
    """torch's CUDA out-of-memory message: the GPU (as the process numbered it), its size, what was free, what
    was asked, what this process held (None when torch could not find its own PID, as in a container's PID
    namespace: it is then among ``holders``) and each process torch listed, by its PID on the host."""

    gpu: int
    total: str
    free: str
    tried: str
    this_process: str | None
    holders: tuple[tuple[int, str], ...]

    @property
    def others_bytes(self) -> float:
        return sum(size_bytes(size) for _, size in self.holders)

    @property
    def others_uncounted(self) -> bool:
        """Other processes held a share of the GPU that matters (1 GiB, or 5 % of a small GPU)."""
        return self.this_process is not None and self.others_bytes >= min(1 << 30, 0.05 * size_bytes(self.total))


def torch_oom(lines: list[str], order: list[int], position: int) -> TorchOom | None:
    """torch's out-of-memory message at the cause's line, if that line is one. A terminal or a log viewer may wrap
    the message: the line is read with the next few, spaces collapsed."""
    if not _OOM.search(lines[order[position]]):  # the cause is another error: a later OOM report is not its
        return None
    text = re.sub(r"\s+", " ", " ".join(lines[i] for i in order[position:position + 4]))
    report = _TORCH_OOM.search(text)
    if report is None or report.start() >= len(re.sub(r"\s+", " ", lines[order[position]])):
        return None  # no report, or only a later line's (another rank's)
    rest = text[report.end():]
    if (following := _OOM.search(rest)) is not None:  # another rank's report on the next line: not this one's
        rest = rest[:following.start()]
    this = _THIS_PROCESS.search(rest)
    return TorchOom(int(report.group("gpu")), report.group("total"), report.group("free"), report.group("tried"),
                    this.group("size") if this else None,
                    tuple((int(m.group("pid")), m.group("size")) for m in _HOLDER.finditer(rest)
                          if not m.group("size").startswith("0 ")))  # a process holding nothing holds nothing


def _torch_oom_note(oom: TorchOom) -> str:
    """What torch said about the GPU: its size, what was free, and who held the rest. Memory other processes
    held is memory the launch's budget never counted (an earlier run's leftovers, another server): the note says
    so before anyone moves --mem-fraction-static."""
    note = f"torch's report: GPU {oom.gpu} has {oom.total}, {oom.free} free when {oom.tried} more was asked"
    listed = ", ".join(f"PID {pid} {size}" for pid, size in oom.holders[:4]) + (", ..." if len(oom.holders) > 4
                                                                                else "")
    if oom.this_process is None:
        # torch could not match its own PID (a container's PID namespace): the list includes this process
        return note + (f"; processes holding it (this one among them): {listed}" if oom.holders else "")
    note += f"; this process held {oom.this_process}"
    if not oom.holders:
        return note
    plural = "es" if len(oom.holders) > 1 else ""
    note += f"; {len(oom.holders)} other process{plural} held {oom.others_bytes / (1 << 30):.2f} GiB ({listed})"
    if oom.others_uncounted:
        note += (" - memory this launch's budget did not count (an earlier run's leftovers or another server): "
                 "`/gpu status` shows who holds the GPU now, `/gpu free` stops them by PID after a confirmation")
    return note


_FRAME = re.compile(r'^\s*File "[^"]+", line \d+|^\s{2,}\S')
_EXCEPTION_LINE = re.compile(r"^\s*(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Interrupt|Exit)\b")


def _phase(lines: list[str], order: list[int], position: int, default: str) -> str:
    """The phase the log itself shows at the cause: the last life-cycle marker up to that line.
    A request rejection stays a request; without markers the rule's own phase stands."""
    if default == "request":
        return default
    for index in reversed(order[:position + 1]):
        for pattern, phase in _PHASE_MARKERS:
            if pattern.search(lines[index]):
                return phase
    return default


def _full_pool_at_the_end(lines: list[str], order: list[int]) -> tuple[int, float] | None:
    """(line index, usage) when the text ends in batches of a server whose token pool is at least 90 %
    full, or in its retractions (a full pool): the scheduler's own last word before it runs out (SGLang
    retracts, then fails, near 1.0)."""
    content = [i for i in order if lines[i].strip()]
    tail = content[-3:]
    if not tail:
        return None
    usages = [(i, usage) for i in tail if (usage := _pool_usage(lines[i])) is not None]
    # every complete batch line at the end reports it (a last line cut mid-way may not)
    if not usages or len(usages) < len(tail) - 1 or min(u for _, u in usages) < 0.9:
        return None
    return max(usages, key=lambda x: x[1])


def _pool_usage(line: str) -> float | None:
    """The token pool's fill a scheduler line reports: a batch line's token usage, or full for a retraction."""
    if _RETRACTED.search(line):
        return 1.0
    m = _TOKEN_USAGE.search(line)
    return float(m.group("usage")) if m else None


_FRAME_AT = re.compile(r'^\s*File "(?P<file>[^"]+)", line \d+, in (?P<where>\S+)')
_RUNPY = ("_run_module_as_main", "_run_code")


def _import_failure(lines: list[str], order: list[int], notes: tuple[str, ...]) -> Finding | None:
    """A traceback whose every frame is a module import (``in <module>``, under runpy), before the server
    read its arguments: SGLang died importing itself, which is a dependency problem whatever the (missing or
    unmatched) exception line says. Medium when the exception line is there, low when the text is cut."""
    content = [i for i in order if lines[i].strip()]
    if any("server_args" in lines[i] or "ServerArgs(" in lines[i] for i in content):
        return None
    starts = [n for n, i in enumerate(content) if "Traceback (most recent call last)" in lines[i]]
    if not starts:
        return None
    tail = content[starts[-1]:]
    frames = [(i, m) for i in tail if (m := _FRAME_AT.search(lines[i]))]
    imports = [(i, m) for i, m in frames if m.group("where") == "<module>"]
    if not imports or any(m.group("where") not in ("<module>", *_RUNPY) for _, m in frames):
        return None
    rule = RULE_BY_LABEL["dependency_version_mismatch"]
    exception = next((i for i in tail if _EXCEPTION_LINE.search(lines[i])), None)
    deepest = imports[-1][0]
    evidence = tuple(Evidence(i + 1, lines[i].strip()[:400]) for i in (deepest, exception) if i is not None)
    said = "its exception is quoted" if exception is not None else "the exception line itself is not in this text"
    return Finding("dependency_version_mismatch", "import", "medium" if exception is not None else "low",
                   "SGLang failed while importing its own modules (every frame of the traceback is a module import, "
                   f"before the server read its arguments): a dependency is missing or of another version; {said}",
                   rule.next_step, evidence, (), notes)


def _last_traceback(lines: list[str], order: list[int]) -> list[int]:
    """The non-empty lines (file indices, in time order) from the last traceback's start, or all of them when
    the text holds no traceback header."""
    content = [i for i in order if lines[i].strip()]
    starts = [n for n, i in enumerate(content) if "Traceback (most recent call last)" in lines[i]]
    return content[starts[-1]:] if starts else content


def _cut_inside_traceback(lines: list[str], order: list[int]) -> bool:
    """True when the text stops in a traceback's frames, before the traceback's exception line."""
    tail = _last_traceback(lines, order)
    if not tail or not _FRAME.search(lines[tail[-1]]):
        return False
    return not any(_EXCEPTION_LINE.search(lines[i]) for i in tail)


def _ends_in_exception(lines: list[str], order: list[int]) -> bool:
    """True when the text's last traceback reaches its exception line (what a process that raised and died wrote)."""
    tail = _last_traceback(lines, order)  # from the last traceback's header, when the text has one
    return bool(tail) and "Traceback (most recent call last)" in lines[tail[0]] and \
        any(_EXCEPTION_LINE.search(lines[i]) for i in tail[1:])


def _cut_site(lines: list[str], order: list[int], notes: tuple[str, ...], seen: set[str]) -> Finding | None:
    """A traceback cut before its exception line, whose deepest frame names the step that failed (_CUT_SITES):
    that step's label, with low confidence and the frame as its evidence."""
    if not _cut_inside_traceback(lines, order):
        return None
    found = None
    for i in _last_traceback(lines, order):
        for label, pattern, site in _CUT_SITES:
            if pattern.search(lines[i].rstrip()):
                found = (i, label, site)
    if found is None:
        return None
    index, label, site = found
    rule = RULE_BY_LABEL[label]
    return Finding(label, _phase(lines, order, order.index(index), rule.phase), "low",
                   f"the log is cut inside a traceback, before its exception line, while {site}: {rule.explanation}",
                   "find the rest of this log (it was cut: rotated, truncated, or the process was killed mid-write); "
                   f"meanwhile: {rule.next_step}", (Evidence(index + 1, lines[index].strip()[:400]),),
                   tuple(sorted(seen - {label})), notes)


# what a cut traceback's frames say about when it was raised, the most specific first: a capture runs a forward
# pass, and serving runs inside the scheduler's process that start-up built
_FRAME_PHASES = (
    (_CAPTURE_CONTEXT, "startup: CUDA graphs"),
    (_RUNTIME_CONTEXT, "runtime"),
    (_LOAD_CONTEXT, "startup: weights"),
    (re.compile(r"\b(?:Scheduler|TpModelWorker|ModelRunner|TpWorkerClass)\(|, in (?:__init__|run_scheduler_process)$"),
     "startup"),
)


def _frames_phase(lines: list[str], tail: list[int]) -> str:
    """The phase a traceback's frames place it in (serving, capture, loading, building the scheduler)."""
    return next((phase for pattern, phase in _FRAME_PHASES if any(pattern.search(lines[i].rstrip()) for i in tail)),
                "unknown")


def _cut_traceback(lines: list[str], order: list[int], notes: tuple[str, ...]) -> Finding | None:
    """A traceback cut before its exception line that no rule reads: say so, where its deepest frame is and when
    its frames place it, so the team fetches the rest of the log instead of reading the frames as a cause."""
    if not _cut_inside_traceback(lines, order):
        return None
    tail = _last_traceback(lines, order)
    has_header = "Traceback (most recent call last)" in lines[tail[0]]
    # without a header the text must end in frames, not merely contain an indented line
    frames = [(i, m) for i in (tail if has_header else tail[-4:]) if (m := _FRAME_AT.search(lines[i]))]
    if not frames:
        return None
    index, deepest = frames[-1]
    path = deepest.group("file")
    file = path[path.rindex("sglang/"):] if "sglang/" in path else "/".join(path.split("/")[-2:])
    shown = list(dict.fromkeys((index, tail[-1])))
    return Finding("unknown", _phase(lines, order, order.index(tail[-1]), _frames_phase(lines, tail)), "low",
                   "the log is cut inside a traceback, before its exception line, and no rule reads its frames alone: "
                   f"the deepest frame is {deepest.group('where')} in {file}; the exception line after it names the "
                   "cause", "find the rest of this log (it was cut: rotated, truncated, or the process was killed "
                   "mid-write) and triage it again; the line after these frames names the cause",
                   tuple(Evidence(i + 1, lines[i].strip()[:400]) for i in shown), (), notes)


def _with_context(hits: list[Hit], lines: list[str], order: list[int],
                  context: LaunchContext) -> list[Hit]:
    """Generic symptoms re-read in the light of the launch (an assert in a speculative run, ...)."""
    extra = []
    for position, index in enumerate(order):
        for feature, pattern, label in _CONTEXT_RULES:
            if getattr(context, feature) and pattern.search(lines[index]):
                rule = RULE_BY_LABEL[label]
                # these are forward-pass symptoms: while serving, unless the log's markers say otherwise
                extra.append((position, Rule(rule.label, rule.patterns, "runtime", rule.explanation + (
                    f" (the launch used {feature.replace('_', ' ')}, whose path this symptom points to)"),
                    rule.next_step, 3), index))
        # a bare KeyError naming the checkpoint's own model_type: transformers does not know it
        for model_type in context.model_types:
            if re.search(rf"KeyError: '{re.escape(model_type)}'", lines[index]):
                extra.append((position, replace(RULE_BY_LABEL["transformers_too_old"], explanation=(
                    f"the installed transformers does not know model_type '{model_type}' (this checkpoint's)")),
                    index))
    return hits + extra


def _stall(lines: list[str], order: list[int], minutes: float | None, context: LaunchContext) -> Finding | None:
    """A log that just stops: say where it stopped, and for how long if known. Silent for less than the follower
    calls a hang, it is no hang: still starting, or stopped on request before it said anything went wrong."""
    content = [lines[i] for i in order if lines[i].strip()]
    if not content or any(_READY.search(x) for x in content):
        return None
    # the furthest stage the log reached (SGLang's start-up only moves forward), at its last mention
    reached = next(((index, where, meaning, label) for pattern, where, meaning, label in _STAGES
                    for index in range(len(content) - 1, -1, -1) if pattern.search(content[index])), None)
    hang = context.hang_after_minutes
    if minutes is not None and hang is not None and minutes < hang:
        index, where = (reached[0], reached[1]) if reached else (len(content) - 1, "it started")
        line_no = lines.index(content[index])
        evidence = (Evidence(line_no + 1, content[index].strip()[:400]),)
        quiet, waits = age_text(minutes * 60), age_text(hang * 60)
        phase = _phase(lines, order, order.index(line_no), "startup")
        if context.stopped_on_request:
            return Finding(STOPPED_ON_REQUEST, phase, "medium",
                           f"stopped on request {quiet} after its last line, after {where}: nothing in the log names a "
                           f"failure before the stop, which came too soon to call it a hang ({waits} without output "
                           "is one)", "launch it again and let it run: a failure names itself in the log, and a hang "
                           f"shows as {waits} without output", evidence)
        return Finding(STILL_STARTING, phase, "medium",
                       f"still starting: its last line, {quiet} ago, came after {where}; nothing in the log names a "
                       f"failure so far, and it is not a hang yet ({waits} without output is one)",
                       "follow its log (`/sglang log`, `gpuops log`): its launch card says when it is ready or fails",
                       evidence)
    if reached is None:
        return None
    index, where, meaning, label = reached
    since = f"no output for {minutes:.0f} minutes" if minutes is not None else "the log stops"
    stopped = "; then it was stopped on request" if minutes is not None and context.stopped_on_request else ""
    rule = RULE_BY_LABEL.get(label)
    return Finding(
        label, rule.phase if rule else "startup", "medium" if minutes is not None else "low",
        f"{since} after {where} - {meaning}{stopped}",
        rule.next_step if rule else "look at the process with py-spy dump; check GPU utilization",
        (Evidence(lines.index(content[index]) + 1, content[index].strip()[:400]),),
    )


_TELLING = re.compile(r"Error|Exception|Traceback|failed|Failed|error:|FATAL|Killed|Aborted|timed out", re.I)


def _no_failure(lines: list[str], order: list[int], notes: tuple[str, ...]) -> Finding | None:
    """A log in which the server said it is ready and nothing after that reports an error: a healthy start,
    not a failure no rule knows (a later error would be quoted as unknown)."""
    ready = [position for position, i in enumerate(order) if _READY.search(lines[i])]
    if not ready:
        return None
    after = [i for i in order[ready[-1] + 1:] if _TELLING.search(lines[i]) and not _BENIGN.search(lines[i])]
    if after:
        return None
    index = order[ready[-1]]
    return Finding(NO_FAILURE, "runtime", "medium",
                   f"no failure in this log: the server reported ready (line {index + 1}) and nothing after that "
                   "reports an error", "if requests fail, check the server's /health and /v1/models and the "
                   "clients' errors; this log shows a healthy start",
                   (Evidence(index + 1, lines[index].strip()[:400]),), (), notes)


def _unknown(lines: list[str], order: list[int], notes: tuple[str, ...]) -> Finding:
    if not any(lines[i].strip() for i in order):
        return Finding("unknown", "unknown", "low", "the log is empty: nothing was written to it, so it names no cause",
                       "check that the launch writes to this file; a process killed before its first line (by the "
                       "kernel's OOM killer) shows in the node's kernel log: give it with --kernel-log (/sglang "
                       "triage reads it itself)", (), (), notes)
    telling = [(i, lines[i]) for i in order if _TELLING.search(lines[i]) and not _BENIGN.search(lines[i])]
    picked = telling[-3:] if telling else [(i, lines[i]) for i in order if lines[i].strip()][-3:]
    explanation, default_phase = "no rule matches this log; the most telling lines are quoted", "unknown"
    if _ends_in_exception(lines, order):  # where it was raised, the code there, and what was raised
        tail = _last_traceback(lines, order)
        raised = next(n for n in range(1, len(tail)) if _EXCEPTION_LINE.search(lines[tail[n]]))
        deepest = max((n for n in range(raised) if _FRAME_AT.search(lines[tail[n]])), default=None)
        if deepest is not None:
            picked = [(tail[n], lines[tail[n]]) for n in dict.fromkeys((deepest, deepest + 1, raised))]
            explanation = ("the log ends in an exception no rule reads: it is quoted with the frame that raised it "
                           "and the code there")
            default_phase = _frames_phase(lines, tail)
    phase = _phase(lines, order, order.index(picked[-1][0]), default_phase)
    return Finding("unknown", phase, "low", explanation, "read the lines above; run with --log-level debug for more",
                   tuple(Evidence(i + 1, x.strip()[:400]) for i, x in picked), (), notes)
