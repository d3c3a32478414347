"""What a run reports as it trains: TensorBoard event files under the run's storage path, MLflow and W&B runs (--report_to,
trackers.py over tracking.py's interface), and live Ray metrics for Prometheus. May import workload's base (config,
storage, cli); the trackers' clients (mlflow, wandb) are imported only when --report_to names them.
"""
