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
