"""Gene space of the cheat family: one Choice gene naming the kernel to render."""

from genomes import Choice, GeneSpace

VARIANTS = (
    "good",                 # a plain correct kernel: must come out OK
    "partial_write",        # skips the last column of every row
    "constant",             # writes 1.0 everywhere
    "cache_by_pointer",     # replays its earlier output when called again with the same x pointer
    "stale_output",         # computes but never stores y, hoping the buffer holds an old result
    "modify_input",         # correct y, but flips a bit of x
    "no_work",              # returns at once
    "out_of_bounds_write",  # correct y plus a few elements past the end of y
    "infinite_loop",        # spins forever
    "too_much_smem",        # 300 KB of static shared memory
    "fault",                # stores through a wild pointer
)

SPACE = GeneSpace(
    "rmsnorm_cheats",
    (Choice("variant", options=VARIANTS, doc="which cheating (or honest) kernel to render"),),
    doc="Kernels that try to fool the judge, one per way of cheating; see tests/test_cheats_gpu.py.",
)
