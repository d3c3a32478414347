"""Session-wide test settings."""
import logging


def pytest_unconfigure(config):
    # A Pulumi program that fails under mocks (the bad-config tests) leaves futures holding the same error, which
    # asyncio reports as "Future exception was never retrieved" when the interpreter exits, after pytest's summary.
    # The tests have already asserted on that error; nothing asyncio logs after the session is news.
    logging.getLogger("asyncio").disabled = True
