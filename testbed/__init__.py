"""A seeded simulator of any system described in a file (`systems/`: HipsterShop with TiDB, Train Ticket, the
OpenTelemetry demo; a user's own; systems drawn at random, `drawn.py`) that writes labelled dumps in the system's
layout or as OTLP."""
