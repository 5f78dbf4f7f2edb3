"""The Kafka adapter: the CloudEvents codec, the event bus (producer), consumer helpers, topics."""
