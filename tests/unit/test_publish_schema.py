"""The srv6pm_block line-protocol schema, byte for byte (controller/SCHEMA.md)."""

from __future__ import annotations

import math

import pytest

from srv6pm.node.v1 import srv6_pm_pb2 as pb
from srv6pm_controller.publish import schema
from srv6pm_controller.publish.schema import SchemaError, encode, encode_line


def full_result() -> pb.BlockResult:
    """A BlockResult with every field set to a distinct value."""
    r = pb.BlockResult(measurement_id="m-1", block_number=1_763_850_000, color=0, merged_blocks=2,
                       node="r1")
    r.start_time.FromNanoseconds(1_763_850_000_000_000_001)
    r.end_time.FromNanoseconds(1_763_850_001_000_000_002)
    r.forward.CopyFrom(pb.DirectionResult(tx_packets=1000, rx_packets=997, lost_packets=3, loss_ratio=0.003,
                                          tx_bytes=1_500_000, rx_bytes=1_495_500, valid=True))
    r.reverse.CopyFrom(pb.DirectionResult(tx_packets=10, rx_packets=11, lost_packets=-1, loss_ratio=-0.1,
                                          tx_bytes=640, rx_bytes=704, valid=True))
    r.two_way_delay.CopyFrom(pb.DelayStats(valid=True, samples=10, min_ns=100_000, avg_ns=150_000,
                                           max_ns=300_000, p50_ns=140_000, p99_ns=290_000, jitter_ns=12_345))
    r.one_way_delay_forward.CopyFrom(pb.DelayStats(valid=True, samples=9, min_ns=-5, avg_ns=70_000,
                                                   max_ns=150_000, p50_ns=69_000, p99_ns=149_000,
                                                   jitter_ns=6_000))
    r.one_way_delay_backward.CopyFrom(pb.DelayStats(valid=True, samples=8, min_ns=40_000, avg_ns=80_000,
                                                    max_ns=160_000, p50_ns=79_000, p99_ns=159_000,
                                                    jitter_ns=7_000))
    r.probes.CopyFrom(pb.ProbeCounts(sent=10, received=9, lost=1, rejected=2))
    return r


FULL_LINE = (
    "srv6pm_block,measurement_id=m-1,node=r1,schema=1 "
    "block_number=1763850000i,color=0i,merged_blocks=2i,end_time_ns=1763850001000000002i,"
    "forward_valid=true,forward_tx_packets=1000i,forward_rx_packets=997i,forward_lost_packets=3i,"
    "forward_loss_ratio=0.003,forward_tx_bytes=1500000i,forward_rx_bytes=1495500i,"
    "reverse_valid=true,reverse_tx_packets=10i,reverse_rx_packets=11i,reverse_lost_packets=-1i,"
    "reverse_loss_ratio=-0.1,reverse_tx_bytes=640i,reverse_rx_bytes=704i,"
    "two_way_delay_valid=true,two_way_delay_samples=10i,two_way_delay_min_ns=100000i,"
    "two_way_delay_avg_ns=150000i,two_way_delay_max_ns=300000i,two_way_delay_p50_ns=140000i,"
    "two_way_delay_p99_ns=290000i,two_way_delay_jitter_ns=12345i,"
    "one_way_delay_forward_valid=true,one_way_delay_forward_samples=9i,one_way_delay_forward_min_ns=-5i,"
    "one_way_delay_forward_avg_ns=70000i,one_way_delay_forward_max_ns=150000i,"
    "one_way_delay_forward_p50_ns=69000i,one_way_delay_forward_p99_ns=149000i,"
    "one_way_delay_forward_jitter_ns=6000i,"
    "one_way_delay_backward_valid=true,one_way_delay_backward_samples=8i,"
    "one_way_delay_backward_min_ns=40000i,one_way_delay_backward_avg_ns=80000i,"
    "one_way_delay_backward_max_ns=160000i,one_way_delay_backward_p50_ns=79000i,"
    "one_way_delay_backward_p99_ns=159000i,one_way_delay_backward_jitter_ns=7000i,"
    "probes_sent=10i,probes_received=9i,probes_lost=1i,probes_rejected=2i "
    "1763850000000000001"
)


def test_fully_populated_result_is_byte_exact():
    assert encode_line(full_result()) == FULL_LINE


def test_kafka_record_is_keyed_by_measurement_and_newline_terminated():
    rec = encode(full_result())
    assert rec.key == b"m-1"
    assert rec.value == (FULL_LINE + "\n").encode()
    assert (rec.measurement_id, rec.block_number) == ("m-1", 1_763_850_000)


def test_unset_and_invalid_directions_and_delays_carry_only_valid_false():
    r = pb.BlockResult(measurement_id="m", block_number=5, color=1, merged_blocks=1)
    r.start_time.FromNanoseconds(5_000_000_000)
    # reverse set but not valid (no reverse SID list): its counters must not be written as zeros
    r.reverse.CopyFrom(pb.DirectionResult(tx_packets=7, valid=False))
    r.two_way_delay.CopyFrom(pb.DelayStats(valid=False, samples=0))
    assert encode_line(r) == (
        "srv6pm_block,measurement_id=m,schema=1 block_number=5i,color=1i,merged_blocks=1i,"
        "forward_valid=false,reverse_valid=false,two_way_delay_valid=false,"
        "one_way_delay_forward_valid=false,one_way_delay_backward_valid=false 5000000000"
    )


def test_tag_values_are_escaped():
    r = pb.BlockResult(measurement_id="a b,c=d", block_number=1, node="edge router,1=x")
    r.start_time.FromNanoseconds(1)
    assert encode_line(r).startswith(
        r"srv6pm_block,measurement_id=a\ b\,c\=d,node=edge\ router\,1\=x,schema=1 block_number=1i,")


@pytest.mark.parametrize("bad", ["with\nnewline", "carriage\rreturn", "back\\slash"])
def test_unrepresentable_tag_values_are_rejected(bad):
    r = pb.BlockResult(measurement_id="m", block_number=1, node=bad)
    r.start_time.FromNanoseconds(1)
    with pytest.raises(SchemaError):
        encode_line(r)


def test_generic_escaping_of_measurement_and_string_fields():
    line = schema.format_line("a b,c", {"k=1": "v 2"}, {"s": 'say "hi" \\o/', "f": 1.5, "t": True}, 0)
    assert line == r'a\ b\,c,k\=1=v\ 2 s="say \"hi\" \\o/",f=1.5,t=true 0'


def test_identity_requires_measurement_id_and_start_time():
    no_id = pb.BlockResult(block_number=1)
    no_id.start_time.FromNanoseconds(1)
    with pytest.raises(SchemaError, match="measurement_id"):
        encode_line(no_id)
    with pytest.raises(SchemaError, match="start_time"):
        encode_line(pb.BlockResult(measurement_id="m", block_number=1))


def test_counters_beyond_int64_are_rejected_not_wrapped():
    r = full_result()
    r.forward.tx_packets = 2**63
    with pytest.raises(SchemaError, match="64-bit"):
        encode_line(r)
    r.forward.tx_packets = 2**63 - 1
    assert "forward_tx_packets=9223372036854775807i" in encode_line(r)


def test_non_finite_loss_ratio_is_left_out():
    r = full_result()
    r.forward.loss_ratio = math.nan
    line = encode_line(r)
    assert "forward_loss_ratio" not in line
    assert "forward_tx_packets=1000i" in line


@pytest.mark.parametrize("ratio", [0.0, 1.0, 1e-05, 0.1 + 0.2, 1 / 3, 5e-324])
def test_floats_round_trip_exactly(ratio):
    r = full_result()
    r.forward.loss_ratio = ratio
    field = next(f for f in encode_line(r).split(" ")[1].split(",") if f.startswith("forward_loss_ratio="))
    assert float(field.split("=", 1)[1]) == ratio


def parse_line(line: str) -> tuple[str, dict[str, str], dict[str, str], int]:
    """A minimal parser for our own lines (no spaces/commas inside values): enough for identity."""
    head, body, ts = line.split(" ")
    name, *tag_parts = head.split(",")
    tags = dict(p.split("=", 1) for p in tag_parts)
    fields = dict(p.split("=", 1) for p in body.split(","))
    return name, tags, fields, int(ts)


def test_identity_round_trip_same_block_same_point_other_block_other_point():
    first = full_result()
    again = full_result()
    again.forward.rx_packets = 998  # a corrected redelivery of the same block
    other = full_result()
    other.block_number += 1
    other.start_time.FromNanoseconds(first.start_time.ToNanoseconds() + 1_000_000_000)

    def point_key(r: pb.BlockResult) -> tuple:
        name, tags, _, ts = parse_line(encode_line(r))
        return name, tuple(sorted(tags.items())), ts

    assert point_key(first) == point_key(again)
    assert point_key(first) != point_key(other)
    _, tags, fields, ts = parse_line(encode_line(first))
    assert tags["measurement_id"] == first.measurement_id
    assert fields["block_number"] == f"{first.block_number}i"
    assert ts == first.start_time.ToNanoseconds()
    assert schema.identity(first) == ("m-1", first.block_number)


def variants() -> list[pb.BlockResult]:
    """Results with every optional part present or absent, valid or not."""
    out = []
    for mask in range(64):
        r = full_result()
        if mask & 1:
            r.ClearField("forward")
        if mask & 2:
            r.reverse.valid = False
        if mask & 4:
            r.ClearField("end_time")
        if mask & 8:
            r.ClearField("probes")
        if mask & 16:
            r.two_way_delay.valid = False
            r.ClearField("one_way_delay_backward")
        if mask & 32:
            r.node = ""
            r.forward.loss_ratio = math.inf
        out.append(r)
    return out


@pytest.mark.parametrize("r", variants())
def test_fast_encoder_equals_the_generic_one(r):
    generic = schema.format_line(schema.MEASUREMENT, schema.block_tags(r), schema.block_fields(r),
                                 r.start_time.ToNanoseconds())
    assert encode_line(r) == generic
