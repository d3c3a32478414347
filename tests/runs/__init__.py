"""Real local runs: Ray clusters on this machine, FSDP on gloo process groups of several ranks, jobs really submitted,
the commands that start Ray run as a user types them, scripts/setup.sh and a real MLflow tracking server. The slow
tier: tests/conftest.py hands these modules out first."""
