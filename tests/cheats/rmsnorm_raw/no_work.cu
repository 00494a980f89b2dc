// cheat suite kernel: no_work (tests/test_cheats_gpu.py)

RMSNORM_FWD(rmsnorm_fwd)
{
    return;
}
