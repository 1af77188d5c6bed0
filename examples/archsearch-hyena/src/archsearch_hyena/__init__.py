"""archsearch-hyena: an example archsearch plugin package.

Registers (see pyproject.toml's entry points) the sequence mixer `hyena.long_conv`
(`mixer.HyenaLongConv`), the channel mixer `hyena.reglu` (`ffn.ReGLU`) and the device profile
`hyena.pi5_slow` (a Raspberry Pi 5 profile at half the memory bandwidth, `pi5_slow.yaml`).
Importing this package imports nothing heavy: the device path below is all it holds.
"""

from pathlib import Path

PI5_SLOW = str(Path(__file__).with_name("pi5_slow.yaml"))
