"""Lab stand-in for ``sglang.srt.server_args``: the launch parser's flags, as ``ServerArgs.add_cli_args`` registers
them on an argparse parser (what the pre-flight reads to check a launch's flags, and what the lab's SGLang stand-in
parses its command line with, refusing what it does not know as SGLang's argparse does).

Its flags are gpuops' own table plus a few real SGLang flags the budget does not model, so the lab shows both kinds.
A lab container given ``"sglang_lacks"`` in its scenario state has those flags taken out (an older release).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from bot.core.flags import ALIASES
from bot.core.installed_flags import GPUOPS_TABLE

# real SGLang launch flags outside gpuops' table: name -> takes a value
NOT_MODELLED = {"--enable-hierarchical-cache": False, "--hicache-ratio": True, "--cuda-graph-bs": True,
                "--json-model-override-args": True, "--enable-multimodal": False, "--moe-runner-backend": True}


def _lacking() -> set[str]:
    """Flags this lab container's SGLang does not have (its scenario's ``sglang_lacks``)."""
    state_dir, vmid = os.environ.get("FAKE_PVE_STATE"), os.environ.get("FAKE_CT")
    if not state_dir or not vmid:
        return set()
    state = json.loads((Path(state_dir) / "node.json").read_text())
    return set(state.get("containers", {}).get(vmid, {}).get("sglang_lacks", []))


class ServerArgs:
    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        lacking = _lacking()
        aliases: dict[str, list[str]] = {}
        for alias, flag in ALIASES.items():
            aliases.setdefault(flag, []).append(alias)
        table = {**{f: takes for f, takes in GPUOPS_TABLE.options.items() if f not in ALIASES}, **NOT_MODELLED}
        for flag, takes_value in table.items():
            if flag in lacking:
                continue
            names = [flag, *aliases.get(flag, [])]
            if flag == "--cuda-graph-bs":
                parser.add_argument(*names, nargs="+")
            elif takes_value:
                parser.add_argument(*names)
            else:
                parser.add_argument(*names, action="store_true")
