"""The Kafka adapter: the CloudEvents codec, the event bus (producer), consumer helpers, topics.

Import from the submodule that holds a name; each has one job (the package itself imports nothing,
so the protocol and the codec load without confluent-kafka):
``codec`` (pure encode/decode), ``records`` (record values), ``protocol`` (``EventBus``),
``producer`` (``KafkaEventBus``), ``consumer`` (settings and offsets), ``topics`` (creation),
``reader`` (read to the end without a group) and ``memory`` (a fake bus for unit tests).
"""
