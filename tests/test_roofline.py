"""The roofline of a pass: bytes and flops counted from the model's shape, limits from a machine."""

from specstream_core.bench.roofline import Machine, fma_gflops, layer_parameters, measure_machine, pass_limit
from specstream_core.kernels.linears import int4_a8, rowinv
from tiny_models import tiny_config


def test_counts_follow_the_model_shape():
    c = tiny_config("llama", vocab=100, layers=4, hidden=64)  # 4 heads, 2 kv heads, head_dim 16, I = 128
    assert layer_parameters(c) == 64 * 64 * 2 + 64 * 32 * 2 + 3 * 64 * 128
    m = Machine(bandwidth_gbs=10.0, peak_gflops=100.0)
    plain = pass_limit(c, m, rows_bottom=1, rows_top=1, birth_layer=2, main_logit_rows=1, context=0)
    assert plain.bytes == (4 * layer_parameters(c) + 100 * 64) * 4
    assert plain.flops == 2 * (4 * layer_parameters(c) + 100 * 64) + 4 * 4 * 1 * 64
    assert plain.memory_ms == plain.bytes / 10e9 * 1e3 and plain.bound == "memory"


def test_more_rows_cost_arithmetic_not_bytes_and_draft_vocab_cuts_head_flops():
    c = tiny_config("llama", vocab=1000, layers=4, hidden=64)
    m = Machine(bandwidth_gbs=10.0, peak_gflops=1.0)  # a slow core: every row shows
    plain = pass_limit(c, m, rows_bottom=1, rows_top=1, birth_layer=2, main_logit_rows=1)
    ss = pass_limit(c, m, rows_bottom=5, rows_top=25, birth_layer=2, main_logit_rows=5, stream_logit_rows=4)
    cut = pass_limit(c, m, rows_bottom=5, rows_top=25, birth_layer=2, main_logit_rows=5, stream_logit_rows=4,
                     draft_vocab=100)
    assert ss.bytes == plain.bytes and ss.flops > 10 * plain.flops and ss.bound == "compute"
    assert cut.flops < ss.flops and cut.bytes == ss.bytes + 100 * 64 * 4  # the draft head is its own copy


def test_measure_machine_gives_positive_rates():
    m = measure_machine(buffer_mb=8, matmul=128, repeats=2)
    assert m.bandwidth_gbs > 0 and m.peak_gflops > 0 and m.dtype == "float32"
    assert m.peak_gflops == max(m.matmul_gflops, m.fma_gflops) and m.matmul_gflops > 0


def test_the_arithmetic_roof_is_the_vector_units_fma_rate_where_the_kernel_builds():
    if not rowinv.available():
        assert fma_gflops(1, repeats=1, steps=1000) == 0.0
        return
    one = fma_gflops(1, repeats=3, steps=200_000)
    # 12 chains x lanes x 2 flops a step: at least one vector FMA every 4 ns on any AVX2 core
    assert one > 2 * rowinv.library().rowinv_lanes() * 0.25


def test_int4_a8_linears_take_the_8_bit_roof():
    """Where the Linears multiply 8-bit integers (int4-a8), their products run on the dot-product roof and
    only attention stays on the fp32 one; that roof is measured where the kernel's VNNI build runs."""
    c = tiny_config("llama", vocab=1000, layers=4, hidden=64)
    m = Machine(bandwidth_gbs=10.0, peak_gflops=1.0, int8_gops=4.0)
    fp32 = pass_limit(c, m, rows_bottom=5, rows_top=25, birth_layer=2, main_logit_rows=5, stream_logit_rows=4)
    a8 = pass_limit(c, m, rows_bottom=5, rows_top=25, birth_layer=2, main_logit_rows=5, stream_logit_rows=4,
                    linear_gops=m.int8_gops)
    attention = 4.0 * (5 * 2 + 25 * 2) * (256 + 25) * 4 * 16
    assert a8.flops == fp32.flops and a8.bytes == fp32.bytes
    assert abs(a8.compute_ms - ((fp32.flops - attention) / 4e9 + attention / 1e9) * 1e3) < 1e-9
    assert int4_a8.available() == (measure_machine(buffer_mb=8, matmul=128, repeats=1).int8_gops > 0)
