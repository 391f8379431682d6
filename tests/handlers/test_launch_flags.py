"""/sglang launch checks its flags against the installed SGLang's own parser, read in the container over real SSH."""

from pathlib import Path

from bot.lab.nodes import container_path
from bot.views import blocks_to_text
from tests.handlers.test_launch_flow import SEED, buttons, model, post_with, wait_text
from tests.handlers.test_triage import failed_launch, relaunched_by, triaged

FITS = f"{SEED} --mem-fraction-static 0.85 --mamba-ssm-dtype bfloat16"  # the seed launch the budget lets start


def flag_reads(lab) -> int:
    """How many times the pre-flight ran SGLang's parser in the container."""
    return sum(1 for argv in lab.nodes["pve5"].calls() if any("sglang.srt.server_args" in a for a in argv))


async def test_a_mistyped_flag_is_refused_with_the_flag_sglang_has_and_one_click_launches_it_corrected(lab):
    lab.nodes["pve5"].set_scenario(129, ["ready"], delay_s=0.02)
    typo = FITS.replace("--context-length", "--context-lenght")
    _, _, calls = await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} {typo}")
    refusal = post_with(calls, "Pre-flight refused")
    text = blocks_to_text(refusal.blocks)
    assert "*flags known*: SGLang 0.5.9 has no `--context-lenght` (did you mean `--context-length`?)" in text
    # the budget read the launch without its context length: its remedies are not offered for it
    assert "Remedies" not in text
    (button,) = buttons(refusal)
    assert button["text"]["text"] == "launch with --context-length (not --context-lenght)"
    await lab.click(button["action_id"], button["value"])
    await wait_text(lab, "*ready*")
    attempt = (await lab.services.attempts.recent("pve5", 129, 1))[0]
    assert "--context-length" in attempt.argv and "--context-lenght" not in attempt.argv
    assert attempt.argv[attempt.argv.index("--context-length") + 1] == "65536"
    passed = blocks_to_text(post_with(lab.standin.calls, "Pre-flight passed").blocks)
    assert "*flags known*: every flag is one SGLang 0.5.9 here accepts" in passed
    assert flag_reads(lab) == 1  # read once for this SGLang version, then kept


async def test_a_flag_outside_gpuops_table_that_sglang_has_launches_and_is_named_as_not_modelled(lab):
    lab.nodes["pve5"].set_scenario(129, ["ready"], delay_s=0.02)
    _, _, calls = await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} {FITS} --enable-hierarchical-cache")
    passed = blocks_to_text(post_with(calls, "Pre-flight passed").blocks)
    assert ("*flags known*: every flag is one SGLang 0.5.9 here accepts; the budget does not model "
            "--enable-hierarchical-cache") in passed
    await wait_text(lab, "*ready*")


async def test_a_flag_the_installed_release_lacks_is_refused_and_forced_it_fails_as_sglang_does(lab):
    """The container's SGLang has no --mamba-full-memory-ratio (an older release): the pre-flight refuses, naming
    it; forced, SGLang's argparse stops the launch with exit 2, and triage names that refusal from the log."""
    state = lab.nodes["pve5"].read_state()
    state["containers"]["129"]["sglang_lacks"] = ["--mamba-full-memory-ratio"]
    lab.nodes["pve5"].write_state(state)
    _, _, calls = await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} {FITS}")
    text = blocks_to_text(post_with(calls, "Pre-flight refused").blocks)
    assert "*flags known*: SGLang 0.5.9 has no `--mamba-full-memory-ratio`" in text
    assert not buttons(post_with(calls, "Pre-flight refused"))  # nothing it could mean instead
    attempt = await failed_launch(lab, "ready", flags="--mem-fraction-static 0.85 --mamba-ssm-dtype bfloat16")
    report, text = await triaged(lab, attempt)
    assert "*launch_argument_error* (high confidence, startup)" in text
    assert "launch_server.py: error: unrecognized arguments: --mamba-full-memory-ratio 0.5" in text
    # the next experiment: the launch without it, through the pre-flight (which now passes) to a ready server
    latest = await relaunched_by(lab, report, "launch with drop --mamba-full-memory-ratio 0.5")
    assert "--mamba-full-memory-ratio" not in latest.argv and "--enable-torch-compile" in latest.argv


async def test_when_sglangs_parser_does_not_load_the_flags_are_checked_against_gpuops_table(lab):
    """An SGLang whose server_args fails to import (a broken install): the pre-flight says so and why, keeps a flag
    outside its own table out (it may be a typo), and lets the table's flags through."""
    server_args = Path(container_path(lab.nodes["pve5"], 129, "site", "sglang", "srt", "server_args.py"))
    server_args.write_text("import sglang.srt.no_such_module\n")
    _, _, calls = await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} {FITS} --enable-hierarchical-cache")
    text = blocks_to_text(post_with(calls, "Pre-flight refused").blocks)
    assert ("*flags known*: gpuops' flag table has no `--enable-hierarchical-cache`; SGLang 0.5.9's own flags could "
            "not be read (its parser did not load:") in text
    assert "ModuleNotFoundError: No module named 'sglang.srt.no_such_module'" in text
    lab.nodes["pve5"].set_scenario(129, ["ready"], delay_s=0.02)
    _, _, calls = await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} {FITS} --tp 2")
    passed = blocks_to_text(post_with(calls, "Pre-flight passed").blocks)
    assert "*flags known*: SGLang 0.5.9's own flags could not be read" in passed
    assert "checked against gpuops' flag table only" in passed
    await wait_text(lab, "*ready*")


async def test_a_launch_whose_model_cannot_be_read_names_that_and_a_typo_only(lab):
    """No budget, so no SGLang version to read the flags of: the refusal is the model's, and the flags line appears
    only for a flag that is a typo of one in gpuops' table."""
    _, _, calls = await lab.slash("/sglang", "launch sglang-a6000 /models/nope --tp 2")
    text = blocks_to_text(post_with(calls, "Pre-flight refused").blocks)
    assert "*model and flags*: no config.json at `/models/nope`" in text and "flags known" not in text
    _, _, calls = await lab.slash("/sglang", "launch sglang-a6000 /models/nope --tp 2 --context-lenght 4096")
    text = blocks_to_text(post_with(calls, "Pre-flight refused").blocks)
    assert "*flags known*: gpuops' flag table has no `--context-lenght` (did you mean `--context-length`?)" in text


async def test_a_flag_list_kept_from_earlier_never_refuses_a_launch_without_a_fresh_read(lab):
    """SGLang reinstalled under the same version string with a flag it lacked: the kept list would refuse the
    launch, so the parser is read again, and the launch passes."""
    state = lab.nodes["pve5"].read_state()
    state["containers"]["129"]["sglang_lacks"] = ["--enable-hierarchical-cache"]
    lab.nodes["pve5"].write_state(state)
    launch = f"launch sglang-a6000 {model(lab)} {FITS} --enable-hierarchical-cache"
    _, _, calls = await lab.slash("/sglang", launch)
    assert "SGLang 0.5.9 has no `--enable-hierarchical-cache`" in blocks_to_text(
        post_with(calls, "Pre-flight refused").blocks)
    assert flag_reads(lab) == 1
    state["containers"]["129"]["sglang_lacks"] = []  # the reinstall
    lab.nodes["pve5"].write_state(state)
    lab.nodes["pve5"].set_scenario(129, ["ready"], delay_s=0.02)
    _, _, calls = await lab.slash("/sglang", launch + " --tp 2")  # not the same text: a repeat would be ignored
    assert "*flags known*: every flag is one SGLang 0.5.9 here accepts" in blocks_to_text(
        post_with(calls, "Pre-flight passed").blocks)
    assert flag_reads(lab) == 2
    await wait_text(lab, "*ready*")


async def test_gpuops_preflight_answers_in_a_terminal_and_launches_nothing(lab, tmp_path):
    """`gpuops preflight` runs the checks /sglang launch makes, in its own process against the lab's nodes and
    Redis: the refusal with its next launches, the corrected flags for a typo, and a pass (3: its warnings) that
    starts nothing and records nothing."""
    import asyncio
    import json
    import shlex

    from tests.edges.test_cli import gpuops

    path = model(lab)
    env = {"PATH": "/usr/bin:/bin", "REDIS_URL": lab.services.settings.redis_url, "HOME": str(tmp_path)}
    inventory = str(lab.workdir / "inventory.yml")

    def preflight(*flags):
        return asyncio.to_thread(gpuops, "preflight", "--container", "sglang-a6000", "--model", path,
                                 "--inventory", inventory, "--", *flags, env=env)

    refused = await preflight(*SEED.split(), "--mem-fraction-static", "0.85")
    assert refused.returncode == 4, refused.stderr
    assert "Pre-flight refused the launch" in refused.stdout and "Not enough memory" in refused.stdout
    assert f"  /sglang launch sglang-a6000 {path} " in refused.stdout
    assert "--mamba-ssm-dtype bfloat16" in refused.stdout.split("Next, each through the pre-flight again:")[1]
    mistyped = FITS.replace("--context-length", "--context-lenght").split()
    typo = await asyncio.to_thread(gpuops, "preflight", "--container", "sglang-a6000", "--model", path, "--inventory",
                                   inventory, "--json", "--", *mistyped, env=env)
    answer = json.loads(typo.stdout)
    assert typo.returncode == 4 and not answer["passed"] and answer["remedies"] == []
    python = lab.services.inventory.container_settings("pve5", 129).python
    assert answer["command"] == shlex.join([python, "-m", "sglang.launch_server", "--model-path", path, *mistyped,
                                            "--port", "30000"])
    assert answer["next"] == [f"/sglang launch sglang-a6000 {path} {FITS}"]
    passed = await preflight(*FITS.split())
    assert passed.returncode == 3, passed.stdout + passed.stderr  # SGLang 0.5.9 is below the model's 0.5.10
    assert "Pre-flight passed" in passed.stdout and "Next" not in passed.stdout
    assert await lab.services.attempts.recent("pve5", 129, 5) == [] and lab.nodes["pve5"].launched_pids() == []


async def test_the_preflight_shows_the_command_line_as_read_from_a_phone_typed_launch(lab):
    """Smart punctuation (a phone's `—` for `--`, curly quotes) is read as the ASCII it replaced; the pre-flight shows
    the server's command line as it will run, the API key redacted, and that is what runs."""
    import os
    import shlex

    lab.nodes["pve5"].set_scenario(129, ["ready"], delay_s=0.02)
    secret = "sk-lab-" + os.urandom(6).hex()
    typed = (FITS.replace("--tp 2", "\u2014tp 2").replace("--enable-torch-compile", "\u2013enable-torch-compile")
             + f" --served-model-name \u201cqwen 27b\u201d --api-key {secret}")
    _, _, calls = await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} {typed}")
    passed = blocks_to_text(post_with(calls, "Pre-flight passed").blocks)
    python = lab.services.inventory.container_settings("pve5", 129).python
    argv = [python, "-m", "sglang.launch_server", "--model-path", model(lab), *shlex.split(FITS),
            "--served-model-name", "qwen 27b", "--api-key", "<redacted>", "--port", "30000"]
    assert f"`{shlex.join(argv)}`" in passed
    assert secret not in passed
    await wait_text(lab, "*ready*")
    attempt = (await lab.services.attempts.recent("pve5", 129, 1))[0]
    assert attempt.argv[attempt.argv.index("--served-model-name") + 1] == "qwen 27b"
    assert "--tp" in attempt.argv and "--enable-torch-compile" in attempt.argv


async def test_a_port_given_as_port_equals_is_the_one_checked_launched_and_health_checked(lab):
    """`--port=31000` (as argparse takes it): the pre-flight checks that port, the server gets it once, and the
    health check asks it, so the launch comes up ready rather than failed with its server left running."""
    lab.nodes["pve5"].set_scenario(129, ["ready"], delay_s=0.02)
    _, _, calls = await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} {FITS} --port=31000")
    passed = blocks_to_text(post_with(calls, "Pre-flight passed").blocks)
    assert "*port free*: 127.0.0.1:31000 is free" in passed
    assert passed.count("--port") == 1 and "--port 31000`" in passed
    await wait_text(lab, "*ready*")
    attempt = (await lab.services.attempts.recent("pve5", 129, 1))[0]
    assert attempt.port == 31000 and attempt.argv[-2:] == ("--port", "31000")
    assert not any(word.startswith("--port=") for word in attempt.argv)


async def test_a_model_path_flag_naming_another_model_is_refused_before_anything_runs(lab):
    """The flags may not swap the model the pre-flight read (SGLang's alias `--model` included); the same model
    given again is taken once."""
    _, _, calls = await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} {FITS} --model /other")
    (answer,) = [c for c in calls if c.method in ("response_url", "chat.postMessage")]
    assert (f"`--model-path /other` in the flags names another model than `{model(lab)}`, the one gpuops reads and "
            "checks: give the model once, as the command's model") in (blocks_to_text(answer.blocks)
                                                                         or answer.params["text"])
    assert await lab.services.attempts.recent("pve5", 129, 1) == []
    lab.nodes["pve5"].set_scenario(129, ["ready"], delay_s=0.02)
    _, _, calls = await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} --model-path={model(lab)} {FITS}")
    passed = blocks_to_text(post_with(calls, "Pre-flight passed").blocks)
    assert passed.count(model(lab)) == 1  # the command line names it once
    await wait_text(lab, "*ready*")
    attempt = (await lab.services.attempts.recent("pve5", 129, 1))[0]
    assert attempt.argv.count("--model-path") == 1 and not any(w.startswith("--model") and "=" in w
                                                               for w in attempt.argv)


async def test_a_triage_experiment_relaunches_on_the_port_the_failed_attempt_was_given(lab):
    """A port the person chose (the default one may be another server's) stays chosen in the next experiment."""
    attempt = await failed_launch(lab, "torch_compile_error",
                                  "--mem-fraction-static 0.85 --mamba-ssm-dtype bfloat16 --port 31000")
    assert attempt.port == 31000
    report, _ = await triaged(lab, attempt)
    latest = await relaunched_by(lab, report, "launch with drop --enable-torch-compile")
    assert latest.port == 31000 and latest.changes == ("- --enable-torch-compile (on)",)


async def test_a_budget_remedy_relaunches_on_the_port_the_failed_attempt_was_given(lab):
    attempt = await failed_launch(lab, "kv_pool_oom", "--mem-fraction-static 0.85 --port 31000")
    report, _ = await triaged(lab, attempt)
    latest = await relaunched_by(lab, report, "launch with --mamba-ssm-dtype bfloat16")
    assert latest.port == 31000 and latest.changes == ("+ --mamba-ssm-dtype bfloat16",)


async def test_a_server_bound_to_its_host_address_is_checked_and_health_checked_there(lab):
    """`--host 127.0.0.2` (loopback, yet not 127.0.0.1): SGLang binds only that address, so the port is checked
    and the health check asks there; asking 127.0.0.1 would call a serving server failed."""
    lab.nodes["pve5"].set_scenario(129, ["ready"], delay_s=0.02)
    _, _, calls = await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} {FITS} --host 127.0.0.2")
    assert "*port free*: 127.0.0.2:30000 is free" in blocks_to_text(post_with(calls, "Pre-flight passed").blocks)
    await wait_text(lab, "*ready*")
    attempt = (await lab.services.attempts.recent("pve5", 129, 1))[0]
    assert attempt.status.value == "ready" and "healthy: /health 200" in attempt.transitions[-1].note
    _, _, calls = await lab.slash("/sglang", f"launch sglang-a6000 {model(lab)} {FITS} --host '127.0.0.1;id'")
    (answer,) = [c for c in calls if c.method == "response_url"]
    assert answer.params["text"] == ":warning: `--host 127.0.0.1;id`: must be an IP address or a host name"
