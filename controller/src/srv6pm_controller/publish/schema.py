"""Wire schema of one published block result: InfluxDB line protocol, measurement ``srv6pm_block``.

Schema version 1 (tag ``schema=1``). The full description, with every field, is in
``controller/SCHEMA.md``; this module is its only implementation.

One Kafka message carries one line::

    srv6pm_block,measurement_id=<id>,node=<node>,schema=1 block_number=42i,color=0i,... <start_ns>

Why line protocol: Telegraf's ``kafka_consumer`` input parses it with ``data_format = "influx"``
and its ``influxdb`` output writes it unchanged, so the pipeline needs no custom code, and the
point InfluxDB stores is exactly the line the controller produced.

Idempotent identity: the tag set depends only on the measurement (id, producing node, schema
version) and the timestamp is the block's start time, so publishing the same block twice
(measurement id + block number) writes the same InfluxDB point twice, which overwrites instead of
adding a second point.

Rules that keep every line parseable by InfluxDB 1.x and Telegraf alike:

- integers are signed 64-bit (``i`` suffix): InfluxDB 1.x rejects unsigned (``u``) fields, so a
  counter above 2**63-1 is a :class:`SchemaError` rather than a silently wrapped value;
- floats are written with Python's shortest round-trip ``repr``, so the value read back is the
  same double; a NaN or infinite float (not representable) leaves its field out;
- a direction or delay statistic that is unset or not valid contributes only its ``*_valid=false``
  field: dashboards never plot a zero that was not measured;
- tag values escape ``,``, ``=`` and space with a backslash; line breaks, backslashes and empty
  values cannot be represented the same way by every parser and are rejected (an empty node is
  simply left out).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from srv6pm.node.v1 import srv6_pm_pb2

MEASUREMENT = "srv6pm_block"
SCHEMA_VERSION = 1
CONTENT_TYPE = "application/vnd.influx.line-protocol"

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1

FieldValue = bool | int | float | str


class SchemaError(ValueError):
    """A block result that cannot be encoded (missing identity, value out of range, bad tag)."""


@dataclass(frozen=True, slots=True)
class EncodedResult:
    """One block result ready for Kafka: identity, message key and line-protocol value."""

    measurement_id: str
    block_number: int
    key: bytes
    value: bytes


# --- generic line-protocol encoding --------------------------------------------------------------

_MEASUREMENT_ESCAPES = str.maketrans({",": "\\,", " ": "\\ "})
_KEY_ESCAPES = str.maketrans({",": "\\,", "=": "\\=", " ": "\\ "})
_FORBIDDEN_IN_TAGS = ("\n", "\r", "\\")


def escape_measurement(name: str) -> str:
    """Escape a measurement name (commas and spaces)."""
    return name.translate(_MEASUREMENT_ESCAPES)


def escape_key(text: str) -> str:
    """Escape a tag key, tag value or field key (commas, equals signs, spaces).

    Raises :class:`SchemaError` for text that line protocol cannot carry unambiguously: empty,
    line breaks, or a backslash (InfluxDB 1.x and Telegraf unescape it differently).
    """
    if not text:
        raise SchemaError("empty tag or field key/value")
    for bad in _FORBIDDEN_IN_TAGS:
        if bad in text:
            raise SchemaError(f"{text!r}: {bad!r} cannot be carried in a tag or key")
    return text.translate(_KEY_ESCAPES)


def format_field(value: FieldValue) -> str:
    """Format one field value: ``true``/``false``, ``<n>i``, shortest-repr float, quoted string."""
    if isinstance(value, bool):  # before int: bool is an int subclass
        return "true" if value else "false"
    if isinstance(value, int):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise SchemaError(f"integer {value} does not fit a signed 64-bit field")
        return f"{value}i"
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SchemaError(f"float {value} is not representable in line protocol")
        return repr(value)
    if isinstance(value, str):
        # String field values escape only the double quote and the backslash.
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    raise SchemaError(f"unsupported field type {type(value).__name__}")


def format_line(
    measurement: str, tags: dict[str, str], fields: dict[str, FieldValue], timestamp_ns: int
) -> str:
    """Render one point as a line (no trailing newline). Tags are sorted by key, fields keep order."""
    if not fields:
        raise SchemaError("a point needs at least one field")
    head = escape_measurement(measurement)
    for key in sorted(tags):
        head += f",{escape_key(key)}={escape_key(tags[key])}"
    body = ",".join(f"{escape_key(key)}={format_field(value)}" for key, value in fields.items())
    return f"{head} {body} {timestamp_ns}"


# --- the srv6pm_block schema ---------------------------------------------------------------------

_DIRECTION_FIELDS = ("tx_packets", "rx_packets", "lost_packets", "loss_ratio", "tx_bytes", "rx_bytes")
_DELAY_FIELDS = ("samples", "min_ns", "avg_ns", "max_ns", "p50_ns", "p99_ns", "jitter_ns")
_PROBE_FIELDS = ("sent", "received", "lost", "rejected")


def _timestamp_ns(result: srv6_pm_pb2.BlockResult, name: str) -> int | None:
    if not result.HasField(name):
        return None
    ts = getattr(result, name)
    return ts.seconds * 1_000_000_000 + ts.nanos


def _put_finite(fields: dict[str, FieldValue], key: str, value: float) -> None:
    # NaN/inf cannot be written; leaving the field out keeps the rest of the block.
    if math.isfinite(value):
        fields[key] = value


def _direction(
    fields: dict[str, FieldValue], prefix: str, result: srv6_pm_pb2.BlockResult, name: str
) -> None:
    direction = getattr(result, name)
    valid = result.HasField(name) and direction.valid
    fields[f"{prefix}_valid"] = valid
    if not valid:
        return
    for attr in _DIRECTION_FIELDS:
        value = getattr(direction, attr)
        if attr == "loss_ratio":
            _put_finite(fields, f"{prefix}_{attr}", value)
        else:
            fields[f"{prefix}_{attr}"] = value


def _delay(fields: dict[str, FieldValue], prefix: str, result: srv6_pm_pb2.BlockResult, name: str) -> None:
    stats = getattr(result, name)
    valid = result.HasField(name) and stats.valid
    fields[f"{prefix}_valid"] = valid
    if not valid:
        return
    for attr in _DELAY_FIELDS:
        fields[f"{prefix}_{attr}"] = getattr(stats, attr)


def block_fields(result: srv6_pm_pb2.BlockResult) -> dict[str, FieldValue]:
    """The fields of one block result, in the documented order (see ``SCHEMA.md``)."""
    fields: dict[str, FieldValue] = {
        "block_number": result.block_number,
        "color": result.color,
        "merged_blocks": result.merged_blocks,
    }
    end_ns = _timestamp_ns(result, "end_time")
    if end_ns is not None:
        fields["end_time_ns"] = end_ns
    _direction(fields, "forward", result, "forward")
    _direction(fields, "reverse", result, "reverse")
    _delay(fields, "two_way_delay", result, "two_way_delay")
    _delay(fields, "one_way_delay_forward", result, "one_way_delay_forward")
    _delay(fields, "one_way_delay_backward", result, "one_way_delay_backward")
    if result.HasField("probes"):
        for attr in _PROBE_FIELDS:
            fields[f"probes_{attr}"] = getattr(result.probes, attr)
    return fields


def block_tags(result: srv6_pm_pb2.BlockResult) -> dict[str, str]:
    """The tags of one block result: measurement id, producing node (if known), schema version."""
    if not result.measurement_id:
        raise SchemaError("block result without measurement_id")
    tags = {"measurement_id": result.measurement_id, "schema": str(SCHEMA_VERSION)}
    if result.node:
        tags["node"] = result.node
    return tags


def encode_line(result: srv6_pm_pb2.BlockResult) -> str:
    """Encode one block result as one line of line protocol (no trailing newline).

    Raises :class:`SchemaError` when the result cannot be encoded faithfully (no measurement id,
    no start time, a tag line protocol cannot carry, an integer beyond signed 64 bits).

    This is the hot path of the publisher (one call per block result), so it formats the known
    fields directly; it yields exactly ``format_line(MEASUREMENT, block_tags(r), block_fields(r),
    start)``, which the unit tests check.
    """
    start_ns = _timestamp_ns(result, "start_time")
    if start_ns is None:
        # The timestamp is half of the point's identity: without it InfluxDB would stamp the
        # arrival time and a redelivered block would become a second point.
        raise SchemaError(f"block {result.block_number} of {result.measurement_id!r} has no start_time")
    tags = block_tags(result)
    head = MEASUREMENT + "".join(f",{key}={escape_key(tags[key])}" for key in sorted(tags))
    parts = [f"block_number={_i64(result.block_number)}i,color={result.color}i,"
             f"merged_blocks={result.merged_blocks}i"]
    end_ns = _timestamp_ns(result, "end_time")
    if end_ns is not None:
        parts.append(f"end_time_ns={end_ns}i")
    for name in ("forward", "reverse"):
        d = getattr(result, name)
        if not (d.valid and result.HasField(name)):
            parts.append(f"{name}_valid=false")
            continue
        ratio = f"{name}_loss_ratio={d.loss_ratio!r}," if math.isfinite(d.loss_ratio) else ""
        parts.append(f"{name}_valid=true,{name}_tx_packets={_i64(d.tx_packets)}i,"
                     f"{name}_rx_packets={_i64(d.rx_packets)}i,{name}_lost_packets={d.lost_packets}i,"
                     f"{ratio}{name}_tx_bytes={_i64(d.tx_bytes)}i,{name}_rx_bytes={_i64(d.rx_bytes)}i")
    for name in ("two_way_delay", "one_way_delay_forward", "one_way_delay_backward"):
        st = getattr(result, name)
        if not (st.valid and result.HasField(name)):
            parts.append(f"{name}_valid=false")
            continue
        parts.append(f"{name}_valid=true,{name}_samples={st.samples}i,{name}_min_ns={st.min_ns}i,"
                     f"{name}_avg_ns={st.avg_ns}i,{name}_max_ns={st.max_ns}i,{name}_p50_ns={st.p50_ns}i,"
                     f"{name}_p99_ns={st.p99_ns}i,{name}_jitter_ns={st.jitter_ns}i")
    if result.HasField("probes"):
        pr = result.probes
        parts.append(f"probes_sent={pr.sent}i,probes_received={pr.received}i,probes_lost={pr.lost}i,"
                     f"probes_rejected={pr.rejected}i")
    return f"{head} {','.join(parts)} {start_ns}"


def _i64(value: int) -> int:
    # Only uint64 proto fields can leave the signed range; int64/uint32 ones cannot.
    if value > _INT64_MAX:
        raise SchemaError(f"integer {value} does not fit a signed 64-bit field")
    return value


def encode(result: srv6_pm_pb2.BlockResult) -> EncodedResult:
    """Encode a block result for Kafka: key = measurement id (UTF-8), value = line + newline."""
    line = encode_line(result)
    return EncodedResult(
        measurement_id=result.measurement_id,
        block_number=result.block_number,
        key=result.measurement_id.encode(),
        value=(line + "\n").encode(),
    )


def identity(result: srv6_pm_pb2.BlockResult) -> tuple[str, int]:
    """The idempotent identity of a block result: (measurement id, block number)."""
    return result.measurement_id, result.block_number
