// cheat suite kernel: modify_input (tests/test_cheats_gpu.py)

RMSNORM_FWD(rmsnorm_fwd)
{
    const int row = blockIdx.x;
    if (row >= M) return;
    rmsnorm_row(x, w, y, rstd, row, N, eps, N);
    __syncthreads();                                      // every read of this row is done
    if (threadIdx.x == 0) {
        unsigned short* bits = (unsigned short*)(x + (size_t)row * (size_t)N);
        bits[0] ^= 1u;                                    // flip the lowest mantissa bit
    }
}
