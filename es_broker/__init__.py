"""es-broker: an event-sourced message broker with Apache RocketMQ 4.x semantics."""

from es_broker import compiled as _compiled

# the busiest plain modules run built from their own source when that build is theirs
# (es_broker/compiled.py, WHOLE)
_compiled.install_finder()
