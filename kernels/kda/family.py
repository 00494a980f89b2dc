"""Kimi Delta Attention forward kernel family (issue 20).

`FAMILY = KDAFamily()` adds the kernel half of the contract to `operation.KDAOperation`:

* `render(genome)`: a block of `#define`s from the genome (genomes/kda.py: chunk, the four
  precision options and the order of the sequences) and the shared-memory size they imply, the text of template.cu, then one
  `extern "C"` entry per state dtype: `kda_fwd_fp32`, `kda_fwd_bf16`. Pure: same genome, same text.
* `launch(genome, case)`: the entry of the case's state dtype, one CTA of 256 threads per
  (head, sequence) (grid (H, N, 1)), `smem_bytes(genome)` of dynamic shared memory (over 48 KiB:
  the runner opts in), the arguments of operation.kernel_args. Every case of the family runs.

The template is the first correct kernel (step 2): one kernel, chunks of 16, nothing pipelined
but the next chunk's loads. kernel_model.py models its arithmetic in numpy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from fitness.family import Case, Launch, import_sibling
from genomes import Genome
from genomes.kda import DEFAULT, SPACE

op = import_sibling(__file__, "operation")

HERE = Path(__file__).resolve().parent
TEMPLATE = HERE / "template.cu"
THREADS = 256
ENTRIES = {"fp32": ("kda_fwd_fp32", "float"), "bf16": ("kda_fwd_bf16", "bf16_bits")}

# shared memory of template.cu's KdaSmem (checked by a static_assert against KDA_SMEM_BYTES)
_CHUNK, _D, _ROW, _ROW16 = 16, 128, 136, 24
_TILE = _CHUNK * _ROW * 2                      # one padded 16 x 128 bf16 tile
_STAGE = 3 * _TILE + _CHUNK * _D * 4           # q, k, v and the gate (fp32-sized rows)


def smem_bytes(genome: Mapping[str, Any]) -> int:
    """Bytes of template.cu's KdaSmem for a genome's precision options."""
    nw = 2 if genome["split_w"] else 1
    ni = 2 if genome["split_intra"] else 1
    tiles = nw + 1 + 3 * ni + 1 + nw + 1              # qd, kd, qp/kp/km, kr, w, o
    return (2 * _STAGE + _CHUNK * _D * 4 + tiles * _TILE + _CHUNK * (_CHUNK + 1) * 4
            + 2 * ni * _CHUNK * _ROW16 * 2 + 2 * _D * 4 + 3 * _CHUNK * 4)


def defines(genome: Mapping[str, Any]) -> dict[str, str]:
    g = genome
    return {"KDA_CHUNK": str(g["chunk"]), "KDA_SPLIT_S": str(int(g["split_s"])), "KDA_SPLIT_U": str(int(g["split_u"])),
            "KDA_SPLIT_W": str(int(g["split_w"])), "KDA_SPLIT_INTRA": str(int(g["split_intra"])),
            "KDA_ORDER_LONGEST": str(int(dict(g).get("order", "index") == "longest_first")),
            "KDA_SMEM_BYTES": str(smem_bytes(g))}


class KDAFamily(op.KDAOperation):
    """KDA forward: the operation (operation.KDAOperation) and the template."""

    def default_genome(self) -> Genome:
        return DEFAULT

    def render(self, genome: Genome) -> str:
        g = genome if isinstance(genome, Genome) else SPACE.make(dict(genome))
        head = [f"// kda genome {g.key}: " + ", ".join(f"{k}={g[k]}" for k in g)]
        head += [f"#define {k} {v}" for k, v in defines(g).items()]
        entries = [f"KDA_ENTRY({name}, {ctype})" for name, ctype in ENTRIES.values()]
        return "\n".join(head) + "\n\n" + TEMPLATE.read_text() + "\n" + "\n".join(entries) + "\n"

    def launch(self, genome: Genome, case: Case) -> Launch:
        p = case.params
        if (int(p["K"]), int(p["V"])) != (op.K_DIM, op.V_DIM):
            raise ValueError(f"the KDA template needs K = V = 128, got K={p['K']} V={p['V']}")
        lens, H = p["lens"], int(p["H"])
        return Launch(kernel=ENTRIES[p["state"]][0], grid=(H, len(lens), 1), block=(THREADS, 1, 1),
                      args=self.kernel_args(case), shared_bytes=smem_bytes(genome))

    def promises(self, genome: Genome) -> dict[str, Sequence[str]]:
        return {"tensor_core_mma": ["HMMA.16816.F32.BF16"], "ldmatrix": ["LDSM"], "cp_async": ["LDGSTS"]}

    def resource_limits(self, genome: Genome) -> dict[str, int]:
        return {"spill_bytes": 0, "local_bytes": 0}


FAMILY = KDAFamily()
