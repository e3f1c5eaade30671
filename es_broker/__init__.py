"""es-broker: an event-sourced message broker with Apache RocketMQ 4.x semantics."""
