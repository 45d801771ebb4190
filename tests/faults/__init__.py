"""Fault injection for the integration tests and scripts/chaos: a loopback TCP proxy, broker
control through scripts/kafka, and a producing workload that accounts for every record."""
