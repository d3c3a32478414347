"""What a run reports as it trains: TensorBoard event files under the run's storage path, and live Ray metrics for
Prometheus. May import workload's base (storage, cli).
"""
