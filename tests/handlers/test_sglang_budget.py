"""/sglang budget through the real app: facts read from the lab container over SSH."""

import pytest

from bot.lab.nodes import container_path
from bot.views import blocks_to_text

SEED_FLAGS = ("--tp 2 --context-length 65536 --enable-torch-compile --speculative-algorithm NEXTN "
              "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 "
              "--mamba-full-memory-ratio 0.5")


async def test_budget_of_the_seed_launch_is_explained_with_a_chart(lab):
    model = container_path(lab.nodes["pve5"], 129, "models", "Qwen3.6-27B")
    status, ack, _ = await lab.slash("/sglang", f"budget sglang-a6000 {model} {SEED_FLAGS} --mem-fraction-static 0.85")
    assert status == 200 and ack == "planning the memory budget on pve5:129 (sglang-a6000)…"
    calls = await lab.standin.wait_for(lambda c: any(x.method == "files.completeUploadExternal" for x in c), 30)
    post = next(c for c in calls if c.method == "chat.postMessage")
    text = blocks_to_text(post.blocks)
    # read from the container: SGLang 0.5.9 installed, two A6000s with 49140 MiB, the real config.json
    assert "SGLang 0.5.9" in text and "2x RTX A6000" in text and "WILL FAIL" in text
    assert "Current value: self.server_args.mem_fraction_static=0.85" in text
    assert "--mamba-ssm-dtype bfloat16" in text and "below 0.5.10" in text
    upload = next(c for c in calls if c.method == "upload")
    assert upload.params["content"].count(b"\x89PNG") == 1
    complete = next(c for c in calls if c.method == "files.completeUploadExternal")
    assert complete.params.get("thread_ts") == post.answer["ts"]


@pytest.mark.parametrize("refused", ["files.getUploadURLExternal", "chat.postMessage"])
async def test_a_budget_whose_chart_cannot_be_attached_is_answered_and_says_why(lab, refused):
    """The explanation goes out and is audited when its chart cannot: the app lacks files:write (the upload is
    refused), or the bot is not in the channel (the explanation came through the response_url, and a file cannot
    go there). The person is told why the chart is missing, not that the command failed."""
    lab.standin.fail[refused] = "missing_scope" if refused.startswith("files") else "not_in_channel"
    model = container_path(lab.nodes["pve5"], 129, "models", "Qwen3.6-27B")
    await lab.slash("/sglang", f"budget sglang-a6000 {model} {SEED_FLAGS} --mem-fraction-static 0.85")
    calls = await lab.standin.wait_for(lambda cs: any("chart is not attached" in str(c.params.get("text"))
                                                      for c in cs), 30)
    answers = [c for c in calls if c.delivered and c.method in ("chat.postMessage", "response_url")]
    assert "WILL FAIL" in blocks_to_text(answers[0].blocks)
    note = answers[-1].params["text"]
    assert note.endswith("Slack refused the upload (`missing_scope`): the app needs the `files:write` scope"
                         if refused.startswith("files") else
                         "so it came privately, where a file cannot go (if the bot is not in the channel: "
                         "`/invite @gpuops`)")
    assert not [c for c in calls if "gpuops failed while answering" in str(c.params.get("text"))]
    assert not lab.standin.of("files.completeUploadExternal")
    audit = await lab.services.store.audit_entries(10)
    assert [e["verdict"] for e in audit if e["action"] == "sglang.budget"] == ["fails"]


async def test_budget_refuses_a_relative_model_path_and_a_node_target(lab):
    _, ack, _ = await lab.slash("/sglang", "budget sglang-a6000 Qwen3.6-27B --tp 2")
    assert "must be an absolute path inside the container or a Hugging Face id" in ack
    _, ack, _ = await lab.slash("/sglang", "budget pve5 /models/x")
    assert "is not one container" in ack


async def test_budget_with_a_bad_flag_value_says_which(lab):
    model = container_path(lab.nodes["pve5"], 129, "models", "Qwen3.6-27B")
    _, ack, calls = await lab.slash("/sglang", f"budget sglang-a6000 {model} --mem-fraction-static 1.7")
    responded = await lab.standin.wait_for(lambda c: any(x.method == "response_url" for x in c), 20)
    text = next(c for c in responded if c.method == "response_url").params["text"]
    assert "--mem-fraction-static 1.7" in text and "between 0 and 1" in text


async def test_missing_model_config_is_a_clear_answer(lab):
    _, ack, _ = await lab.slash("/sglang", "budget sglang-a6000 /nonexistent/model --tp 2")
    responded = await lab.standin.wait_for(lambda c: any(x.method == "response_url" for x in c), 20)
    text = next(c for c in responded if c.method == "response_url").params["text"]
    assert "no config.json at `/nonexistent/model`" in text


async def test_budget_reads_the_draft_models_config_inside_the_container(lab):
    import shutil
    from pathlib import Path

    from tests.conftest import FIXTURES

    model = container_path(lab.nodes["pve5"], 129, "models", "Qwen3.6-27B")
    draft = Path(container_path(lab.nodes["pve5"], 129, "models", "draft-1b"))
    draft.mkdir(parents=True, exist_ok=True)
    shutil.copy(FIXTURES / "model-configs/meta-llama__Llama-3.2-1B-Instruct/config.json", draft / "config.json")
    try:
        await lab.slash("/sglang", f"budget sglang-a6000 {model} --tp 2 --speculative-algorithm STANDALONE "
                                   f"--speculative-draft-model-path {draft}")
        calls = await lab.standin.wait_for(lambda c: any(x.method == "chat.postMessage" for x in c), 30)
        text = blocks_to_text(next(c for c in calls if c.method == "chat.postMessage").blocks)
        assert "standalone draft, from its config" in text  # read over SSH from the container, not estimated
    finally:
        shutil.rmtree(draft)


async def test_budget_reads_the_checkpoints_index_and_flags_a_missing_mtp_head(lab):
    import json
    from pathlib import Path

    model = Path(container_path(lab.nodes["pve5"], 129, "models", "Qwen3.6-27B"))
    # an index like a re-save's that kept the trunk and dropped the MTP layers its config still names
    keys = ["lm_head.weight", "model.language_model.embed_tokens.weight", "model.language_model.norm.weight"]
    index = {"metadata": {"total_size": 55_600_000_000}, "weight_map": dict.fromkeys(keys, "model.safetensors")}
    (model / "model.safetensors.index.json").write_text(json.dumps(index))
    await lab.slash("/sglang", f"budget sglang-a6000 {model} {SEED_FLAGS} --mem-fraction-static 0.88")
    calls = await lab.standin.wait_for(lambda c: any(x.method == "files.completeUploadExternal" for x in c), 30)
    text = " ".join(blocks_to_text(next(c for c in calls if c.method == "chat.postMessage").blocks).split())
    assert "checkpoint size 51.78 GiB / tp 2" in text  # the index's total, read in the container
    assert "holds no MTP tensor" in text and "launch without --speculative-algorithm" in text


async def test_budget_of_a_hub_id_reads_the_snapshot_the_containers_cache_names(lab):
    import shutil
    from pathlib import Path

    from tests.conftest import FIXTURES

    # the Hugging Face cache layout in the container: refs/main names the snapshot that holds the files
    repo = Path(container_path(lab.nodes["pve5"], 129, "hf-cache", "models--Qwen--Qwen3.6-27B"))
    revision = "6f2b0c1d9e8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c"
    (repo / "snapshots" / revision).mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision + "\n")
    shutil.copy(FIXTURES / "model-configs/Qwen__Qwen3.6-27B/config.json", repo / "snapshots" / revision)
    try:
        status, ack, _ = await lab.slash("/sglang", f"budget sglang-a6000 Qwen/Qwen3.6-27B {SEED_FLAGS} "
                                                    "--mem-fraction-static 0.85")
        assert status == 200 and ack.startswith("planning the memory budget")
        calls = await lab.standin.wait_for(lambda c: any(x.method == "chat.postMessage" for x in c), 30)
        text = blocks_to_text(next(c for c in calls if c.method == "chat.postMessage").blocks)
        assert "Qwen3.6-27B" in text and "SGLang 0.5.9" in text and "WILL FAIL" in text
        # a Hub id the container has not downloaded is said to be missing, with where it was looked for
        await lab.slash("/sglang", "budget sglang-a6000 Qwen/Qwen3-8B --tp 2")
        responded = await lab.standin.wait_for(lambda c: any(x.method == "response_url" for x in c), 20)
        text = next(c for c in responded if c.method == "response_url").params["text"]
        assert "`Qwen/Qwen3-8B` is not in the Hugging Face cache of container" in text
        assert "models--Qwen--Qwen3-8B/refs/main" in text and "huggingface-cli download Qwen/Qwen3-8B" in text
    finally:
        shutil.rmtree(repo.parent)


async def test_gpuops_budget_of_a_container_is_the_slack_answer_in_a_terminal(lab, tmp_path):
    """`gpuops budget --container` reads the model, SGLang's version and the live free memory in the container,
    as /sglang budget does: the printed table is the one the use case computes, and the chart is written."""
    import asyncio
    import json

    from bot.budget import plan_budget
    from bot.core.inventory import resolve_targets
    from bot.views import budget_text
    from tests.edges.test_cli import gpuops

    model = container_path(lab.nodes["pve5"], 129, "models", "Qwen3.6-27B")
    flags = tuple(SEED_FLAGS.split()) + ("--mem-fraction-static", "0.85")
    target = resolve_targets("sglang-a6000", lab.services.inventory)[0]
    planned = await plan_budget(lab.services.transport, lab.services.inventory, target, model, flags)
    inventory = str(lab.workdir / "inventory.yml")
    env = {"PATH": "/usr/bin:/bin", "REDIS_URL": lab.services.settings.redis_url, "HOME": str(tmp_path)}
    chart = tmp_path / "budget.png"
    out = await asyncio.to_thread(gpuops, "budget", "--container", "sglang-a6000", "--model", model,
                                  "--inventory", inventory, "--chart", str(chart), "--", *flags, env=env)
    assert out.returncode == 4, out.stderr  # 4: it will fail
    assert out.stdout.strip() == budget_text(planned.budget, planned.title).strip()
    assert "SGLang 0.5.9" in out.stdout and "Not enough memory" in out.stdout
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads((await asyncio.to_thread(gpuops, "budget", "--container", "sglang-a6000", "--model", model,
                                               "--inventory", inventory, "--json", "--", *flags, env=env)).stdout)
    assert data["verdict"] == "fails" and data["remedies"][0]["change"] == planned.budget.remedies[0].change
    mixed = await asyncio.to_thread(gpuops, "budget", "--container", "sglang-a6000", "--model", model,
                                    "--gpu", "RTX A6000", "--inventory", inventory, "--", *flags, env=env)
    assert mixed.returncode == 2 and "read there: drop --gpu" in mixed.stderr
    nothing = await asyncio.to_thread(gpuops, "budget", "--model", model, "--", *flags, env=env)
    assert nothing.returncode == 2 and "--gpu is required" in nothing.stderr


async def test_budget_names_a_flag_the_containers_sglang_would_refuse(lab, tmp_path):
    """The container's own SGLang parser decides: a typo is named with the flag it meant (not merely noted as close
    to one the budget reads), in Slack and in `gpuops budget --container`, whose exit status says it would fail."""
    import asyncio
    import json

    from tests.edges.test_cli import gpuops

    model = container_path(lab.nodes["pve5"], 129, "models", "Qwen3.6-27B")
    flags = "--tp 2 --context-lenght 32768 --mamba-ssm-dtype bfloat16 --enable-hierarchical-cache"
    await lab.slash("/sglang", f"budget sglang-a6000 {model} {flags}")
    calls = await lab.standin.wait_for(lambda c: any(x.method == "files.completeUploadExternal" for x in c), 30)
    text = blocks_to_text(next(c for c in calls if c.method == "chat.postMessage").blocks)
    assert (":x: SGLang's parser would refuse the launch: SGLang 0.5.9 has no `--context-lenght` (did you mean "
            "`--context-length`?)") in text
    assert "is close to" not in text and "--enable-hierarchical-cache" in text  # passed through, not refused
    inventory = str(lab.workdir / "inventory.yml")
    env = {"PATH": "/usr/bin:/bin", "REDIS_URL": lab.services.settings.redis_url, "HOME": str(tmp_path)}
    out = await asyncio.to_thread(gpuops, "budget", "--container", "sglang-a6000", "--model", model,
                                  "--inventory", inventory, "--json", "--", *flags.split(), env=env)
    assert out.returncode == 4, out.stderr
    assert json.loads(out.stdout)["flags_refused"] == [
        "SGLang 0.5.9 has no `--context-lenght` (did you mean `--context-length`?)"]


async def test_a_budget_on_gpus_a_launch_holds_names_that_launch_to_stop_in_slack_and_in_a_terminal(lab, tmp_path):
    """The GPUs are held by the server a launch brought up: the budget's first remedy is to stop that launch as the
    attempt it is, as the launch pre-flight says, where it said to `/gpu free` them (which leaves a launch's
    processes to its stop)."""
    import asyncio
    import json

    from tests.edges.test_cli import gpuops
    from tests.handlers.test_launch_flow import post_with, wait_text
    from tests.handlers.test_scheduler import ready_server

    attempt = await ready_server(lab)
    model = container_path(lab.nodes["pve5"], 129, "models", "Qwen3.6-27B")
    await lab.slash("/sglang", f"budget sglang-a6000 {model} {SEED_FLAGS} --mem-fraction-static 0.85")
    text = blocks_to_text(post_with(await wait_text(lab, "Remedies", method="chat.postMessage"), "Remedies").blocks)
    stop = f"stop {attempt.id} (ready, port 30000) first: /sglang stop {attempt.id}"
    assert f"1. `{stop}` — " in text and "/gpu free" not in text, text
    env = {"PATH": "/usr/bin:/bin", "REDIS_URL": lab.services.settings.redis_url, "HOME": str(tmp_path)}
    out = await asyncio.to_thread(gpuops, "budget", "--container", "sglang-a6000", "--model", model, "--inventory",
                                  str(lab.workdir / "inventory.yml"), "--json", "--", *SEED_FLAGS.split(), env=env)
    assert json.loads(out.stdout)["remedies"][0]["change"] == stop, out.stderr
