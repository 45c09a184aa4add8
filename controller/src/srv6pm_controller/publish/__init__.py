"""Publishing block results: the wire schema (line protocol), the Kafka publisher, its disk spool.

The daemon creates one :class:`ResultPublisher` for its lifetime and calls
:meth:`ResultPublisher.publish` for every block result it receives from the nodes::

    publisher = ResultPublisher("127.0.0.1:9092", state_dir / "kafka-spool.sqlite3", topic="srv6pm.results")
    publisher.publish(block_result)      # never blocks on an absent Kafka
    publisher.metrics()                  # {"published": ..., "spooled": ..., "spool_depth": ..., ...}
    publisher.close()                    # at shutdown: undelivered results stay in the spool file
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from srv6pm_controller.publish.schema import SCHEMA_VERSION, EncodedResult, SchemaError, encode, encode_line
from srv6pm_controller.publish.spool import Spool

if TYPE_CHECKING:
    from srv6pm_controller.publish.kafka_publisher import DEFAULT_TOPIC, ResultPublisher


def __getattr__(name: str) -> Any:
    # The Kafka client is imported on first use only: the schema needs no Kafka library.
    if name in ("DEFAULT_TOPIC", "ResultPublisher"):
        from srv6pm_controller.publish import kafka_publisher

        return getattr(kafka_publisher, name)
    raise AttributeError(name)


__all__ = [
    "DEFAULT_TOPIC",
    "SCHEMA_VERSION",
    "EncodedResult",
    "ResultPublisher",
    "SchemaError",
    "Spool",
    "encode",
    "encode_line",
]
