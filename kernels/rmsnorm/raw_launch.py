"""Raw-source hooks of the RMSNorm forward family: the regions of template.cu a proposal may rewrite.

operators/source_edit.py reads REGIONS: each is the whole definition of one device function of
the rendered source. A rewrite keeps the function's signature (the rest of the template calls it)
and is compiled and judged like any genome's kernel, with the parent genome's own launch
(operators.source_edit.ParentLaunch: this family's launch(genome, case)).
"""

REGIONS = {
    "rsqrt": {"function": "rms_rsqrt",
              "doc": "float rms_rsqrt(float v): 1/sqrt(v) as the genome's rsqrt gene asks (approx, newton, precise)"},
    "sum_of_squares": {"function": "sumsq",
                       "doc": "template <typename T, int N> void sumsq(const uint32_t* w, float& a0, float& a1): "
                              "adds the squares of the elements packed in N words into two fp32 accumulators"},
    "row_reduce": {"function": "row_reduce",
                   "doc": "template <int C> float row_reduce(float v, int it, Shared<C>& sh): the sum of a "
                          "row's partial sums across the warp, the CTA's rows and the cluster's CTAs"},
    "store_y": {"function": "st_y",
                "doc": "template <int NW> void st_y(void* p, const uint32_t* s, const Pol& pol): the store of one "
                       "packet of y (NW words) with the genome's cache qualifier and L2 policy"},
}

#: a whole kernel written from scratch (operators/llm.py offers it at `[operators.llm] kernel_rate`):
#: how its entry binds to the family's buffers, and a launch (fitness.raw.LaunchSpec) to start from
KERNEL = {
    "convention": (
        'extern "C" __global__ void <entry>(const T* x, const W* w, T* y, float* rstd, int M, int N, float eps)\n'
        "x is [M, N] row-major (row stride N) in the case's dtype T (__nv_bfloat16, __half or float), w is [N] "
        "fp32 (W = float), y is [M, N] in T, rstd is [M] fp32 or NULL. y[i, :] = x[i, :] * rsqrt(mean_j "
        "x[i, j]^2 + eps) * w. M * N can exceed 2^31: compute element offsets in 64 bits. Every element of y "
        "must be written on every launch; nothing may be kept between launches. Rows holding +-inf or NaN "
        "follow IEEE float arithmetic (as torch). Restrict the cases your kernel handles with `when` (e.g. "
        "\"dtype == 'bf16' and weight_dtype == 'fp32'\"): the others are recorded as unsupported."),
    "example_launch": {"kernel": "rmsnorm_fwd", "grid": ["M", 1, 1], "block": [256, 1, 1],
                       "args": ["x", "w", "y", "rstd", "i32:M", "i32:N", "f32:eps"], "shared_bytes": 0,
                       "when": "dtype == 'bf16' and weight_dtype == 'fp32'"},
}
