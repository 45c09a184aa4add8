"""srv6pm_twamp: STAMP / TWAMP-Light probe protocol library, sender, reflector, loss and delay arithmetic.

Modules, one concern each:

* ``wire/`` - the formats: ``stamp`` (RFC 8762 test packets, both modes), ``tlv`` (RFC 8972
  TLVs), ``sr_tlv`` (RFC 9503 Destination Node Address and Return Path), ``twamp_light``
  (draft-gandhi-spring-twamp-srpm loss query/response), ``layout`` (the one-definition codec).
* ``timestamps`` - NTP / PTPv2 timestamps and the Error Estimate.
* ``arithmetic/`` - ``loss`` and ``delay``: pure functions.
* ``sockets`` - UDP sockets with kernel receive timestamps, hop limit, traffic class, SRH.
* ``reflector``, ``sender``, ``loss_query`` - the asyncio protocol engines.
* ``counters`` - the counter-reader interface the caller plugs its data-plane counters into.
* ``cli`` - the ``srv6pm-stamp`` tool.
"""
