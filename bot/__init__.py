"""gpuops: a Slack chat-ops bot for SGLang servers on Proxmox GPU hosts."""

import warnings

# asyncssh (2.24 here) names cryptography's DSA key types when it is imported, and cryptography 51 warns about that,
# ten lines on every start. Nothing the user configured causes it nor can fix it, and it buried the first lines of
# `gpuops lab`. Only that message, only from asyncssh, is hidden.
warnings.filterwarnings("ignore", message="DSA is deprecated", module=r"asyncssh\.")
